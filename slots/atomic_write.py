"""Write a file so that its final name only ever holds a complete file.

A slot save can fail halfway (disk full, a serialisation error, the process
killed). llama.cpp then leaves a partial file under the requested name and
answers 200 with `n_written: 0`. Here the bytes go to a temporary file in the
same directory (so the rename cannot cross filesystems), are flushed and
fsynced, and only then renamed over the final name; the directory is fsynced
so the rename itself survives a crash. A failure removes the temporary file
and re-raises: the final name holds either the old file or the new one.

The temporary file is created 0600 by `tempfile.mkstemp` and keeps that
mode: slot files hold KV derived from users' prompts. Its name starts with
a dot and ends in `.tmp`; a restore that names it anyway meets a file whose
digest guards it like any other.

Not here: the slot format, file-name validation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write"]


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> int:
    """Call `write(fileobj)` into a temp file, then publish it as `path`.

    Returns the size of the published file in bytes. Any exception from
    `write`, flushing, fsync or the rename propagates after the temporary
    file is removed.
    """
    path = Path(path)
    directory = path.parent
    # The final name may already be 255 bytes; the temporary one must fit too.
    stem = path.name.encode("utf-8")[:64].decode("utf-8", errors="ignore")
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=f".{stem}.", suffix=".tmp")
    try:
        with open(fd, "wb") as fileobj:
            write(fileobj)
            fileobj.flush()
            os.fsync(fileobj.fileno())
            size = os.fstat(fileobj.fileno()).st_size
        os.replace(temp_name, path)
    except BaseException:
        # BaseException too: a KeyboardInterrupt mid-write must not leave
        # a stray temporary file behind either.
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)
    return size


def _fsync_directory(directory: Path) -> None:
    # Makes the rename durable. Some platforms cannot open a directory for
    # fsync; there the rename is as durable as the OS makes it.
    try:
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
