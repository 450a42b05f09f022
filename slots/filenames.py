"""Which slot file names a client may use, and where they live.

Clients name slot files in `POST /slots/{id}?action=save|restore` bodies, so
a name is untrusted input that becomes a path. The rules are llama.cpp's
`fs_validate_filename` without subdirectories, so a client that works
against llama.cpp gets the same answers here, except that every refusal
says which rule was broken. A name is a single path component: no
separators (or their Unicode look-alikes), no `..` anywhere, nothing a
filesystem would silently rewrite (Windows strips trailing dots and
spaces), nothing invisible.

`resolve_slot_path` adds a second, independent guard: whatever the rules
let through must still resolve inside the slot directory, so a symlink
planted there cannot point a save or restore elsewhere.

Not here: reading or writing files, the file format.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["InvalidSlotFilename", "validate_slot_filename", "resolve_slot_path"]

MAX_FILENAME_BYTES = 255  # the common largest file name on Linux filesystems

_RESERVED = frozenset('/\\:*?"<>|')
# Characters that render like a separator or a dot, and invisible ones.
_LOOKALIKES = {
    0xFF0E: "U+FF0E FULLWIDTH FULL STOP (looks like '.')",
    0x2215: "U+2215 DIVISION SLASH (looks like '/')",
    0x2216: "U+2216 SET MINUS (looks like '\\')",
    0xFFFD: "U+FFFD REPLACEMENT CHARACTER",
    0xFEFF: "U+FEFF BYTE ORDER MARK",
}


class InvalidSlotFilename(ValueError):
    """A slot file name broke one of the rules; the message names which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid slot filename: {reason}")


def validate_slot_filename(name: str | bytes) -> str:
    """Return `name` (decoded, if given as bytes) if it is a safe slot file name."""
    if isinstance(name, bytes):
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSlotFilename("the name is not valid UTF-8") from None
    if not name:
        raise InvalidSlotFilename("the name is empty")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        # Only lone surrogates cannot be encoded: they are not characters.
        raise InvalidSlotFilename("the name is not valid UTF-8 (a lone surrogate)") from None
    if len(encoded) > MAX_FILENAME_BYTES:
        raise InvalidSlotFilename(
            f"the name is {len(encoded)} bytes of UTF-8, longer than {MAX_FILENAME_BYTES}"
        )
    for position, char in enumerate(name):
        code = ord(char)
        if code <= 0x1F or code == 0x7F or 0x80 <= code <= 0x9F:
            raise InvalidSlotFilename(f"control character U+{code:04X} at position {position}")
        if char in _RESERVED:
            raise InvalidSlotFilename(f"reserved character {char!r} at position {position}")
        if code in _LOOKALIKES:
            raise InvalidSlotFilename(f"{_LOOKALIKES[code]} at position {position}")
    # Only U+0020 counts, as in llama.cpp: other whitespace is not stripped
    # by any filesystem.
    if name[0] == " " or name[-1] == " ":
        raise InvalidSlotFilename("leading or trailing space")
    if name[-1] == ".":
        raise InvalidSlotFilename("trailing '.'")
    if ".." in name:
        raise InvalidSlotFilename("'..' in the name")
    # Unreachable after the trailing-dot rule, kept because it is the rule
    # that matters most and must not depend on the order of the others.
    if name == ".":
        raise InvalidSlotFilename("the name is '.'")
    return name


def resolve_slot_path(save_dir: Path, name: str | bytes) -> Path:
    """`save_dir / name` for a valid name that resolves inside `save_dir`."""
    name = validate_slot_filename(name)
    path = Path(save_dir) / name
    root = Path(save_dir).resolve()
    resolved = path.resolve()
    if resolved.parent != root:
        raise InvalidSlotFilename(f"the name resolves to {resolved}, outside the slot directory")
    return path
