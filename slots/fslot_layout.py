"""The `.fslot` byte layout: constants, the error type, and header parsing.

This is the half of the format that only looks at numbers: it turns the
bytes of a header into validated counts and says how long the body must be.
`slots.fslot` builds on it to encode, decode and hand out the payload.
See docs/fslot-format.md for the tables.

The rule this module exists to keep: nothing is parsed or allocated from a
number the file declared until that number has been bounded by bytes the
file actually contains. Lengths are Python ints (they cannot overflow), the
body length must be matched EXACTLY (a longer body disagrees with its header
as much as a shorter one), and the per-layer arrays of version 2 are numpy
views over the header, never Python lists sized by a declared count.

Not here: torch, numpy payload arrays, files on disk, identity comparison.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

from slots.identity import KvDtype, SlotIdentity

MAGIC = b"FRXSLOT1"
# Explicit set, not `<= CURRENT`: retiring a layout must be a deliberate edit.
READABLE_FORMAT_VERSIONS = frozenset({1, 2})
VERSION_FULL = 1  # every layer holds positions [0, positions)
VERSION_SUFFIX = 2  # some windowed layer holds only [first_held, positions)

# magic + version u32 + header_len u32 + body_len u64 + SHA-256(header || body)
PREFIX = struct.Struct("<8sIIQ32s")
PREFIX_LEN = PREFIX.size  # 56
# n_layers, n_kv_heads, head_dim, dtype tag, positions, n_prompt, n_logits,
# model_name_len, fingerprint_len
FIXED_FIELDS = struct.Struct("<9I")
U32_MAX = 0xFFFF_FFFF

DTYPE_TAGS: dict[int, KvDtype] = {0: KvDtype.F32, 1: KvDtype.F16, 2: KvDtype.BF16}
TAG_OF_DTYPE: dict[KvDtype, int] = {dtype: tag for tag, dtype in DTYPE_TAGS.items()}

# A model name or fingerprint is a short string. Bounding them keeps decoding
# a header's strings from costing more than a few KiB whatever the file says
# (a Python str can take 4 bytes per character).
MAX_IDENTITY_STRING_BYTES = 4096
# Callers refuse larger files before reading them (`check_size`).
MAX_SLOT_FILE_BYTES = 64 * 1024**3


class FormatCheck(enum.StrEnum):
    """Stable names of the checks, in the order they run."""

    TOO_LARGE = "too_large"
    NOT_A_FILE = "not_a_file"
    TOO_SHORT = "too_short"
    MAGIC = "magic"
    VERSION = "version"
    TRUNCATED = "truncated"
    TRAILING_BYTES = "trailing_bytes"
    DIGEST = "digest"
    HEADER_TOO_SHORT = "header_too_short"
    DTYPE = "dtype"
    NO_LAYERS = "no_layers"
    SHAPE = "shape"
    NO_POSITIONS = "no_positions"
    FIRST_HELD = "first_held"
    HEADER_STRINGS = "header_strings"
    UTF8 = "utf8"
    BODY_LENGTH = "body_length"


class SlotFormatError(Exception):
    """A slot file failed a structural check; `.check` names which one."""

    def __init__(self, check: FormatCheck, detail: str) -> None:
        self.check = FormatCheck(check)
        self.detail = detail
        super().__init__(f"slot file refused by the {self.check.value!r} check: {detail}")


def check_size(size: int) -> None:
    """Refuse a file larger than any slot this server will read, before reading it."""
    if size > MAX_SLOT_FILE_BYTES:
        raise SlotFormatError(
            FormatCheck.TOO_LARGE,
            f"the file is {size} bytes, above the {MAX_SLOT_FILE_BYTES}-byte limit",
        )


@dataclass(frozen=True)
class SlotHeader:
    """A header that agrees with itself and with the body length it sits before."""

    version: int
    identity: SlotIdentity
    positions: int
    n_prompt: int
    n_logits: int
    # None for version 1 (every layer starts at 0); for version 2 a
    # read-only little-endian u32 view over the header bytes.
    first_held: np.ndarray | None

    def first_held_of(self, layer: int) -> int:
        return 0 if self.first_held is None else int(self.first_held[layer])

    @property
    def held_positions_total(self) -> int:
        """Sum over layers of positions held: what the KV part of the body stores."""
        n_layers = self.identity.n_layers
        if self.first_held is None:
            return n_layers * self.positions
        # uint64 accumulator: at most 2^30 layers (bounded by the header) of
        # at most 2^32 each cannot overflow it; no temporary array is made.
        return n_layers * self.positions - int(self.first_held.sum(dtype=np.uint64))

    def body_length(self) -> int:
        ident = self.identity
        per_position = ident.n_kv_heads * ident.head_dim * ident.kv_dtype.itemsize
        # Tokens are u32, logits f32; K and V each per held position.
        return 4 * self.n_prompt + 4 * self.n_logits + 2 * per_position * self.held_positions_total


def parse_header(version: int, header: memoryview, body_len: int) -> SlotHeader:
    """Validate a digest-checked header against itself and against `body_len`.

    Check order is part of the contract (docs/fslot-format.md): fixed
    fields fit, known dtype, layers, shape, positions, per-layer array fits
    and is in range, strings fill the rest, strings are UTF-8, and finally
    the counts add up to exactly `body_len`.
    """
    if len(header) < FIXED_FIELDS.size:
        raise SlotFormatError(
            FormatCheck.HEADER_TOO_SHORT,
            f"the header is {len(header)} bytes, shorter than its {FIXED_FIELDS.size} bytes "
            f"of fixed fields",
        )
    (n_layers, n_kv_heads, head_dim, tag, positions, n_prompt, n_logits, name_len, fp_len) = (
        FIXED_FIELDS.unpack_from(header, 0)
    )
    if tag not in DTYPE_TAGS:
        raise SlotFormatError(
            FormatCheck.DTYPE, f"kv dtype tag {tag} is not one of {sorted(DTYPE_TAGS)}"
        )
    if n_layers == 0:
        raise SlotFormatError(FormatCheck.NO_LAYERS, "the header declares no layers")
    if n_kv_heads == 0 or head_dim == 0:
        raise SlotFormatError(
            FormatCheck.SHAPE, f"degenerate layer shape: {n_kv_heads} kv heads x {head_dim}"
        )
    if positions == 0:
        # Also what bounds n_layers by the body in version 1: every layer
        # then costs at least one position's K and V.
        raise SlotFormatError(FormatCheck.NO_POSITIONS, "the header declares zero positions")

    cursor = FIXED_FIELDS.size
    first_held = None
    if version == VERSION_SUFFIX:
        if 4 * n_layers > len(header) - cursor:
            raise SlotFormatError(
                FormatCheck.HEADER_TOO_SHORT,
                f"the header cannot hold the first_held array of {n_layers} layers",
            )
        first_held = np.frombuffer(header, dtype="<u4", count=n_layers, offset=cursor)
        cursor += 4 * n_layers
        highest = int(first_held.max())
        if highest > positions:
            layer = int(first_held.argmax())
            raise SlotFormatError(
                FormatCheck.FIRST_HELD,
                f"layer {layer} claims to hold positions from {highest}, past its "
                f"{positions} positions",
            )

    if name_len > MAX_IDENTITY_STRING_BYTES or fp_len > MAX_IDENTITY_STRING_BYTES:
        raise SlotFormatError(
            FormatCheck.HEADER_STRINGS,
            f"model name ({name_len} bytes) or fingerprint ({fp_len} bytes) is longer than "
            f"{MAX_IDENTITY_STRING_BYTES} bytes",
        )
    if cursor + name_len + fp_len != len(header):
        raise SlotFormatError(
            FormatCheck.HEADER_STRINGS,
            f"model name ({name_len} bytes) + fingerprint ({fp_len} bytes) do not fill the "
            f"{len(header) - cursor} header bytes left for them",
        )
    model_name = _utf8(header[cursor : cursor + name_len], "model name")
    fingerprint = _utf8(header[cursor + name_len :], "fingerprint")

    parsed = SlotHeader(
        version=version,
        identity=SlotIdentity(
            model_name=model_name,
            n_layers=n_layers,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            kv_dtype=DTYPE_TAGS[tag],
            fingerprint=fingerprint,
        ),
        positions=positions,
        n_prompt=n_prompt,
        n_logits=n_logits,
        first_held=first_held,
    )
    computed = parsed.body_length()
    if computed != body_len:
        raise SlotFormatError(
            FormatCheck.BODY_LENGTH,
            f"the body is {body_len} bytes but the header's counts add up to {computed}: "
            f"the header does not describe this payload",
        )
    return parsed


def build_header(identity: SlotIdentity, positions: int, n_prompt: int, n_logits: int,
                 first_held: list[int] | None) -> bytes:
    """The header bytes for these counts; `first_held` None means version 1."""
    name = identity.model_name.encode("utf-8")
    fingerprint = identity.fingerprint.encode("utf-8")
    for label, value in (("model name", name), ("fingerprint", fingerprint)):
        if len(value) > MAX_IDENTITY_STRING_BYTES:
            raise ValueError(f"{label} is {len(value)} bytes, above {MAX_IDENTITY_STRING_BYTES}")
    fields = (identity.n_layers, identity.n_kv_heads, identity.head_dim,
              TAG_OF_DTYPE[identity.kv_dtype], positions, n_prompt, n_logits,
              len(name), len(fingerprint))
    for value in fields:
        if not 0 <= value <= U32_MAX:
            raise ValueError(f"header field value {value} does not fit a u32")
    parts = [FIXED_FIELDS.pack(*fields)]
    if first_held is not None:
        parts.append(struct.pack(f"<{len(first_held)}I", *first_held))
    parts += [name, fingerprint]
    return b"".join(parts)


def _utf8(raw: memoryview, field: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as error:
        detail = f"the {field} is not valid UTF-8 ({error.reason})"
        raise SlotFormatError(FormatCheck.UTF8, detail) from None


def check_prefix(prefix: bytes | memoryview, file_size: int) -> tuple[int, int, int, bytes]:
    """The checks the 56-byte prefix alone allows, in the documented order (size, length, magic, version,
    declared lengths against the file's); returns (version, header_len, body_len, digest). A reader runs
    them before reading the rest, so a file that is no slot file is refused without reading it whole."""
    check_size(file_size)
    if file_size < PREFIX_LEN or len(prefix) < PREFIX_LEN:
        raise SlotFormatError(
            FormatCheck.TOO_SHORT,
            f"it is {file_size} bytes, shorter than the {PREFIX_LEN}-byte prefix",
        )
    magic, version, header_len, body_len, stored = PREFIX.unpack_from(prefix, 0)
    if magic != MAGIC:
        raise SlotFormatError(FormatCheck.MAGIC, f"bad magic {magic!r}, expected {MAGIC!r}")
    if version not in READABLE_FORMAT_VERSIONS:
        raise SlotFormatError(
            FormatCheck.VERSION,
            f"format version {version}; this build reads {sorted(READABLE_FORMAT_VERSIONS)}",
        )
    # The bound is the file, not a constant. Python ints: nothing wraps.
    declared, available = header_len + body_len, file_size - PREFIX_LEN
    if declared > available:
        raise SlotFormatError(
            FormatCheck.TRUNCATED,
            f"it declares {declared} bytes of header+body, only {available} follow the prefix",
        )
    if declared < available:
        raise SlotFormatError(
            FormatCheck.TRAILING_BYTES,
            f"it declares {declared} bytes of header+body, but {available} follow the prefix",
        )
    return version, header_len, body_len, stored
