"""Which checkpoint a slot file belongs to, and how to tell two apart.

A saved KV prefix is only meaningful under the exact weights and tokenizer
that produced it: the same token ids under another tokenizer are other text,
and the same KV under other weights is noise that still has the right shape.
llama.cpp's slot file carries no identity at all, so restoring a slot from
another checkpoint goes unnoticed there. Here every `.fslot` file carries a
`SlotIdentity`, and a file's KV reaches no page and no payload until that
identity has been compared against the serving checkpoint's (see
`slots.slot_io.restore_file` and `slots.fslot.UnverifiedSlot.verify`).

Three checks protect a restore; this module is the third:
  1. the file carries an identity at all (framing + digest, `slots.fslot`),
  2. the header describes exactly the bytes that follow it (`slots.fslot`),
  3. that identity is the serving checkpoint's (`SlotIdentity.compare`).

`checkpoint_fingerprint` is what makes check 3 mean "the same weights and
tokenizer" rather than "a model of the same shape". It is a fast content
sample, not a full hash: reading every byte of a multi-GB checkpoint at
startup would cost seconds to minutes for a check whose job is to catch the
wrong checkpoint, not a deliberately forged one. It therefore hashes
everything small in full (config, tokenizer files, every safetensors JSON
header, file sizes) and a strided sample of each weight file. Two checkpoints
whose weights differ only in bytes the sample never touches would collide;
independently trained or initialised checkpoints differ everywhere.

Not here: torch (bookkeeping never imports it), file format, file names.
"""

from __future__ import annotations

import enum
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "KvDtype",
    "SlotIdentity",
    "IdentityMismatch",
    "checkpoint_fingerprint",
]


class KvDtype(enum.StrEnum):
    """Element type of the saved K and V.

    numpy has no bfloat16, so bf16 travels as its raw 16-bit patterns in a
    `uint16` array: the runner reinterprets (`tensor.view(torch.bfloat16)`),
    it never converts numerically.
    """

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"

    @property
    def numpy_dtype(self) -> str:
        """Little-endian numpy dtype string the file stores this type as."""
        return _NUMPY_DTYPES[self]

    @property
    def itemsize(self) -> int:
        return 2 if self in (KvDtype.F16, KvDtype.BF16) else 4


_NUMPY_DTYPES = {KvDtype.F32: "<f4", KvDtype.F16: "<f2", KvDtype.BF16: "<u2"}


class IdentityMismatch(Exception):
    """A slot file belongs to another model than the one being served.

    `field` names what differs ("n_layers", "n_kv_heads", "head_dim",
    "kv_dtype", "checkpoint" for the weights/tokenizer fingerprint,
    "model_name"); `ours` is the file's value, `theirs` the server's.
    """

    check = "identity"

    def __init__(self, field: str, ours: object, theirs: object) -> None:
        self.field = field
        self.ours = ours
        self.theirs = theirs
        if field == "checkpoint":
            what = (
                f"slot was saved under checkpoint fingerprint {ours}, but this server "
                f"serves checkpoint fingerprint {theirs}: same-shaped model, different "
                f"weights or tokenizer"
            )
        else:
            shown = [v.value if isinstance(v, enum.Enum) else v for v in (ours, theirs)]  # 'f32', not the enum's repr
            what = f"slot file has {field}={shown[0]!r}, but the serving model has {field}={shown[1]!r}"
        super().__init__(f"slot belongs to another model ({field} differs): {what}")


@dataclass(frozen=True)
class SlotIdentity:
    """What a slot file must agree with before its KV may be loaded.

    `model_name` should be stable for a checkpoint (e.g. its directory
    name), not a per-launch alias: it is compared like every other field.
    """

    model_name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    kv_dtype: KvDtype
    fingerprint: str

    def __post_init__(self) -> None:
        # Accept "bf16" as well as KvDtype.BF16; refuse anything else now
        # rather than when the first file is written.
        object.__setattr__(self, "kv_dtype", KvDtype(self.kv_dtype))

    def compare(self, serving: SlotIdentity) -> None:
        """Raise `IdentityMismatch` naming the first field that differs.

        Shape first (the most telling message when the model is a different
        one altogether), then the fingerprint (same shape, other weights or
        tokenizer: the restore this whole check exists to refuse), then name.
        """
        for field in ("n_layers", "n_kv_heads", "head_dim", "kv_dtype"):
            ours, theirs = getattr(self, field), getattr(serving, field)
            if ours != theirs:
                raise IdentityMismatch(field, ours, theirs)
        if self.fingerprint != serving.fingerprint:
            raise IdentityMismatch("checkpoint", self.fingerprint, serving.fingerprint)
        if self.model_name != serving.model_name:
            raise IdentityMismatch("model_name", self.model_name, serving.model_name)


# Files hashed in full when present. Tokenizer files are here because a slot
# stores token ids: the same ids under another vocabulary are another prompt.
FINGERPRINTED_TEXT_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
SAMPLE_COUNT = 64
SAMPLE_BYTES = 4096
# safetensors itself refuses headers above 100 MB; so do we, rather than
# reading an arbitrary amount because a file said so.
_MAX_SAFETENSORS_HEADER = 100_000_000
_SCHEME = b"anchorage-checkpoint-fingerprint-v1"


def serving_identity(spec, kv_dtype: str, model_dir: Path) -> SlotIdentity:
    """The identity a server's slot files carry and its restores demand: the checkpoint's architecture and KV
    shape (`spec`, a ModelSpec), the pool's KV dtype name ("bf16", ...) and the checkpoint's fingerprint."""
    return SlotIdentity(spec.architecture, spec.num_layers, spec.num_kv_heads, spec.head_dim, kv_dtype,
                        checkpoint_fingerprint(model_dir))


def checkpoint_fingerprint(model_dir: Path) -> str:
    """Hex SHA-256 identifying a checkpoint directory's weights and tokenizer.

    Independent of the directory's path and of file timestamps, so a copied
    checkpoint keeps its fingerprint. Reads O(files x 256 KiB), not the
    weights. Raises FileNotFoundError when the directory has no
    `*.safetensors` file: a fingerprint that covers no weights would vouch
    for any weights.
    """
    model_dir = Path(model_dir)
    weights = sorted(p for p in model_dir.iterdir() if p.suffix == ".safetensors" and p.is_file())
    if not weights:
        raise FileNotFoundError(f"no *.safetensors file in {model_dir}: nothing to fingerprint")
    digest = hashlib.sha256(_SCHEME)
    for name in FINGERPRINTED_TEXT_FILES:
        path = model_dir / name
        if path.is_file():
            _absorb(digest, b"file", name.encode(), path.read_bytes())
    for path in weights:
        _absorb_weight_file(digest, path)
    return digest.hexdigest()


def _absorb(digest: hashlib._Hash, *parts: bytes) -> None:
    # Length-prefixed so no two different sequences of parts hash alike.
    for part in parts:
        digest.update(struct.pack("<Q", len(part)))
        digest.update(part)


def _absorb_weight_file(digest: hashlib._Hash, path: Path) -> None:
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        _absorb(digest, b"weights", path.name.encode(), struct.pack("<Q", size))
        header_len = struct.unpack("<Q", os.pread(fd, 8, 0))[0] if size >= 8 else None
        if header_len is None or header_len > size - 8 or header_len > _MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path} is not a safetensors file: bad header length prefix")
        _absorb(digest, b"header", _pread_exact(fd, header_len, 8))
        if size <= SAMPLE_COUNT * SAMPLE_BYTES:
            # Small enough that the sample would be the whole file anyway.
            _absorb(digest, b"all", _pread_exact(fd, size, 0))
            return
        # Evenly spaced, first sample at 0 and last ending exactly at EOF.
        span = size - SAMPLE_BYTES
        for i in range(SAMPLE_COUNT):
            offset = i * span // (SAMPLE_COUNT - 1)
            _absorb(digest, b"sample", _pread_exact(fd, SAMPLE_BYTES, offset))


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            raise ValueError("checkpoint file shrank while it was being fingerprinted")
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)
