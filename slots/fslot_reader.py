"""Reading an `.fslot` file front to back in bounded pieces, hashing as it goes.

A restore used to read the whole file into one fresh buffer, hash it, and
only then copy the KV into the pool. For a 448 MiB slot that buffer is 448
MiB of memory the process had never touched: on these VMs such memory costs
up to a second to fault in on some restores and nothing on others (measured
0.27 s against 1.07 s for the same read), and a long slot of a larger model
needed its whole size again in RAM. `SlotReader` reads the file in order
into memory the caller names instead (`read_into`: for a restore, the pool's
own pages) and passes over what the caller does not want (`skip`, through a
few reused buffers of `READ_CHUNK_BYTES`).

The digest still covers every byte past the prefix: a second thread hashes
the bytes about every READ_CHUNK_BYTES while the next ones are read (hashlib
lets go of the GIL), and a reused buffer is refilled only once its hash is
done. What the format promises about
the order of checks (docs/fslot-format.md) is kept by `refuse`: an error
found before the digest could be checked -- a lying header, another model's
identity, impossible contents -- is reported only after the rest of the file
was hashed, and as `digest` if the digest does not match, so a random
corruption is still reported as corruption.

Not here: what the bytes mean past the header (`slots.slot_io`), torch.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import numpy as np

from slots.fslot_layout import PREFIX_LEN, FormatCheck, SlotFormatError, SlotHeader, check_prefix, parse_header

# The most bytes one piece holds: small enough that the last piece's hash, which nothing overlaps, is
# short (16 MiB: about 10 ms) and the reused buffers stay small, large enough that hand-overs cost nothing.
READ_CHUNK_BYTES = 16 << 20
# Buffers `skip` reads into in turn: one being read into while the others are hashed.
RING = 3


class SlotReader:
    """An open slot file past its prefix's checks (0-4). Read it in order: `header`, then the body with
    `read_into` (into the caller's memory: the pool's pages, for a restore) and `skip`, then `finish`; on
    an error of the caller's, `refuse`."""

    def __init__(self, f, size: int, prefix: bytes, hasher: ThreadPoolExecutor) -> None:
        self.version, self.header_len, self.body_len, self._stored = check_prefix(prefix, size)
        self._f, self._hasher = f, hasher
        self.file_bytes, self.prefix = size, bytes(prefix)
        self._digest = hashlib.sha256()
        self._left = self.header_len + self.body_len  # bytes past the prefix not yet read
        self._hashing: deque[Future] = deque()  # in order: one worker keeps the digest's order
        self._ring: list[np.ndarray | None] = [None] * RING
        self._ring_hashing: list[Future | None] = [None] * RING
        self._turn = 0
        self._header: SlotHeader | None = None

    def header(self) -> SlotHeader:
        """Read and parse the header (checks 6-14). Raises SlotFormatError; its digest is not checked yet."""
        if self._header is None:
            raw = memoryview(np.empty(self.header_len, dtype=np.uint8))
            self.read_into(raw)
            self._header = parse_header(self.version, raw, self.body_len)
        return self._header

    def read_into(self, *views: memoryview) -> None:
        """Fill `views`, in order, with the next bytes; a second thread hashes them about every
        READ_CHUNK_BYTES, as soon as they are in. The caller keeps the views unchanged until `finish`."""
        batch, size = [], 0
        for view in views:
            for start in range(0, len(view), READ_CHUNK_BYTES):
                part = view[start:start + READ_CHUNK_BYTES]
                self._fill(part)
                batch.append(part)
                size += len(part)
                if size >= READ_CHUNK_BYTES:
                    self._hash(batch)
                    batch, size = [], 0
        if batch:
            self._hash(batch)

    def _pieces(self, nbytes: int) -> Iterator[memoryview]:
        """The next `nbytes` in views of at most READ_CHUNK_BYTES, each valid until the next is asked for:
        the few buffers they are read into are reused once their hash is done."""
        while nbytes > 0:
            take = min(READ_CHUNK_BYTES, nbytes)
            self._turn = (self._turn + 1) % RING
            view = memoryview(self._buffer(take))[:take]
            self._fill(view)
            self._ring_hashing[self._turn] = self._hash([view])
            nbytes -= take
            yield view

    def skip(self, nbytes: int) -> None:
        """Hash the next `nbytes` without handing them out."""
        for _ in self._pieces(nbytes):
            pass

    def finish(self) -> None:
        """Check that the whole file was read and that the digest matches (check 5)."""
        if self._left:
            raise AssertionError(f"{self._left} bytes of the slot file were never read")
        for part in self._hashing:
            part.result()
        self._hashing.clear()
        if self._digest.digest() != self._stored:
            raise SlotFormatError(FormatCheck.DIGEST, "the SHA-256 does not match header+body: the file is corrupt")

    def digest(self) -> bytes:
        """The SHA-256 of everything past the prefix, once `finish` has run."""
        return self._digest.digest()

    def refuse(self, error: BaseException) -> NoReturn:
        """Raise `error`, found before the digest was checked, in the format's order: the rest of the file is
        hashed first, and a digest that does not match is reported instead (the file is corrupt, which may
        be all that is wrong with it)."""
        self.skip(self._left)
        self.finish()
        raise error

    def _hash(self, views: list[memoryview]) -> Future:
        # One task per batch: a task per page-sized view cost more in hand-overs than the hashing did.
        while self._hashing and self._hashing[0].done():  # bounded by what is still in flight
            self._hashing.popleft().result()
        done = self._hasher.submit(update_digest, self._digest, views)
        self._hashing.append(done)
        return done

    def _buffer(self, nbytes: int) -> np.ndarray:
        hashing = self._ring_hashing[self._turn]
        if hashing is not None:
            hashing.result()  # the buffer's last bytes are still being hashed
        buffer = self._ring[self._turn]
        if buffer is None or len(buffer) < nbytes:
            # Uninitialised: zero-filling would touch every page before the read writes it again.
            buffer = self._ring[self._turn] = np.empty(max(nbytes, min(READ_CHUNK_BYTES, self._left)), np.uint8)
        return buffer

    def _fill(self, view: memoryview) -> None:
        if len(view) > self._left:
            raise AssertionError(f"asked for {len(view)} bytes, {self._left} are left in the slot file")
        got = _read_into(self._f, view, 0)
        if got < len(view):  # it shrank after its size was taken
            raise SlotFormatError(FormatCheck.TRUNCATED, f"the file ended {self._left - got} bytes short of "
                                  "the length its prefix declares, while it was read")
        self._left -= got


@contextmanager
def open_slot(path: Path, max_bytes: int | None = None) -> Iterator[SlotReader]:
    """Open a slot file and run the checks its size and 56-byte prefix allow (0-4), before reading more.

    The size is taken from the open descriptor, so the file checked is the file read; `max_bytes` (the
    server's --max-slot-file-bytes) is checked on it too (`too_large`). A file that is no slot file costs
    56 bytes, whatever its size. Leaving by an exception drops the hashing not yet done.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb", buffering=0) as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SlotFormatError(FormatCheck.NOT_A_FILE, f"{path} is not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise SlotFormatError(FormatCheck.TOO_LARGE,
                                  f"the file is {info.st_size} bytes, over --max-slot-file-bytes {max_bytes}")
        prefix = bytearray(min(PREFIX_LEN, info.st_size))
        with memoryview(prefix) as into:  # released before the cut below: a viewed bytearray cannot shrink
            got = _read_into(f, into, 0)
        del prefix[got:]
        with ThreadPoolExecutor(1, thread_name_prefix="fslot-hash") as hasher:  # no thread before a submit
            reader = SlotReader(f, info.st_size, prefix, hasher)  # checks 1-4
            try:
                yield reader
            except BaseException:
                hasher.shutdown(cancel_futures=True)
                raise


def update_digest(digest, views: list[memoryview]) -> None:
    """`digest` updated with `views` in order: one task of the hashing thread."""
    for view in views:
        digest.update(view)


def _read_into(f, view: memoryview, filled: int) -> int:
    """Fill `view` from `f` past its first `filled` bytes (a raw read may return less than asked);
    returns how many bytes it holds, fewer should the file end sooner."""
    while filled < len(view):
        got = f.readinto(view[filled:])
        if not got:
            break
        filled += got
    return filled
