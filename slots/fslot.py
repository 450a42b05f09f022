"""The `.fslot` file: one saved KV prefix, encoded, decoded and verified.

Ported from ferrox's slot file (seed 003) and byte-for-byte compatible with
its version 1. A file is a fixed 56-byte prefix (magic, version, header and
body lengths, SHA-256 over header || body), a header (shape, counts, the
checkpoint identity) and a body (prompt tokens, pending logits, then per
layer all K followed by all V). Version 2 adds, per layer, the first
position it still holds, for windowed layers whose early KV was released.
docs/fslot-format.md has the tables, the check order and the errors.

Why it is shaped so:
- Decoding never loops over floats in Python and never copies the body: the
  payload arrays are `np.frombuffer` views over the caller's buffer (bytes,
  bytearray, memoryview or mmap). They keep that buffer alive, may be
  unaligned, and are read-only when the buffer is; the runner copies them
  into its page tensors anyway.
- A decoded file is an `UnverifiedSlot`. The only way to its payload is
  `verify(serving_identity)`, so a slot of another checkpoint cannot be
  loaded by forgetting a check. The per-layer views are built only after
  that check, so their count is bounded by the serving model too.
- `write_to` streams: it hashes the arrays in place and writes them in
  place, so a multi-hundred-MB slot is never concatenated in memory. Into
  a seekable file it does both at once (the digest goes in last, over a
  placeholder); into a stream, hashing first.
- Files on disk are read through `slots.fslot_reader` (a second thread
  hashes each piece as it arrives); `read_slot_file` reads one whole, a
  restore streams one into the pool piece by piece (`slots.slot_io`).

Not here: torch (the runner converts), paths and names (`slots.filenames`),
durable writes (`slots.atomic_write`), engine bookkeeping.
"""

from __future__ import annotations

import hashlib
import io
import mmap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from slots.fslot_layout import (
    MAGIC,
    MAX_SLOT_FILE_BYTES,
    PREFIX,
    PREFIX_LEN,
    READABLE_FORMAT_VERSIONS,
    VERSION_FULL,
    VERSION_SUFFIX,
    FormatCheck,
    SlotFormatError,
    SlotHeader,
    build_header,
    check_prefix,
    check_size,
    parse_header,
)
from slots.fslot_reader import READ_CHUNK_BYTES, open_slot, update_digest
from slots.identity import SlotIdentity


__all__ = [
    "LayerKV", "SlotPayload", "UnverifiedSlot", "SlotFormatError", "FormatCheck",
    "READABLE_FORMAT_VERSIONS", "MAX_SLOT_FILE_BYTES", "check_size",
    "encode", "write_to", "decode", "check_prefix", "read_slot_file",
]


@dataclass
class LayerKV:
    """One layer's saved KV: positions [first_held, first_held + len(k)).

    k and v: [held_positions, n_kv_heads, head_dim], dtype float32, float16,
    or uint16 holding bfloat16 bit patterns. To write, each may also be a
    list of such arrays, the rows in order: a save streams straight out of
    the pool's pages, one view per run of consecutive pages.
    """

    k: np.ndarray | list[np.ndarray]
    v: np.ndarray | list[np.ndarray]
    first_held: int = 0

    @property
    def positions(self) -> int:
        """The sequence length this layer's KV belongs to."""
        return self.first_held + sum(int(part.shape[0]) for part in _parts(self.k))


def _parts(rows: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    return rows if isinstance(rows, list) else [rows]


@dataclass
class SlotPayload:
    """A slot in memory: the prompt it covers, the logits predicting the next
    token, and one LayerKV per layer (all of the same `positions`)."""

    tokens: np.ndarray  # [n_prompt] uint32
    pending_logits: np.ndarray  # [n_logits] float32 (may be empty)
    layers: list[LayerKV] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return self.layers[0].positions


class UnverifiedSlot:
    """A structurally sound slot file not yet checked against the serving model."""

    def __init__(self, header: SlotHeader, buffer: memoryview, body_offset: int) -> None:
        self._header = header
        self._buffer = buffer
        self._body_offset = body_offset

    @property
    def identity(self) -> SlotIdentity:
        return self._header.identity

    @property
    def format_version(self) -> int:
        return self._header.version

    @property
    def positions(self) -> int:
        return self._header.positions

    @property
    def n_tokens(self) -> int:
        return self._header.n_prompt

    @property
    def file_bytes(self) -> int:
        return len(self._buffer)

    def verify(self, serving: SlotIdentity) -> SlotPayload:
        """The payload, if this slot belongs to `serving`; else IdentityMismatch."""
        self.identity.compare(serving)
        return self._payload()

    def _payload(self) -> SlotPayload:
        header, ident = self._header, self._header.identity
        cursor = self._body_offset

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal cursor
            array = np.frombuffer(self._buffer, dtype=dtype, count=count, offset=cursor)
            cursor += array.nbytes
            return array

        tokens = take("<u4", header.n_prompt)
        logits = take("<f4", header.n_logits)
        shape = (ident.n_kv_heads, ident.head_dim)
        per_position = ident.n_kv_heads * ident.head_dim
        layers = []
        for index in range(ident.n_layers):
            first = header.first_held_of(index)
            held = header.positions - first
            k = take(ident.kv_dtype.numpy_dtype, held * per_position).reshape(held, *shape)
            v = take(ident.kv_dtype.numpy_dtype, held * per_position).reshape(held, *shape)
            layers.append(LayerKV(k=k, v=v, first_held=first))
        return SlotPayload(tokens=tokens, pending_logits=logits, layers=layers)


def encode(identity: SlotIdentity, payload: SlotPayload) -> bytes:
    """The whole file as bytes. Prefer `write_to` for large slots."""
    out = io.BytesIO()
    write_to(out, identity, payload)
    return out.getvalue()


def write_to(fileobj: BinaryIO, identity: SlotIdentity, payload: SlotPayload) -> int:
    """Write `payload` as a slot file to `fileobj`; returns bytes written.

    Writes version 1 when every layer holds all positions (readable by any
    ferrox-compatible reader), version 2 only when some layer holds a suffix.
    Raises ValueError when the payload disagrees with `identity` or itself.
    """
    header, chunks = _plan(identity, payload)
    body_len = sum(chunk.nbytes for chunk in chunks)
    version = VERSION_FULL if _all_layers_full(payload) else VERSION_SUFFIX
    digest = hashlib.sha256(header)
    if not _seekable(fileobj):
        for chunk in chunks:
            digest.update(chunk)
        fileobj.write(PREFIX.pack(MAGIC, version, len(header), body_len, digest.digest()))
        fileobj.write(header)
        for chunk in chunks:
            fileobj.write(chunk)
        return PREFIX_LEN + len(header) + body_len
    # The digest heads the file but is known only once the body is hashed: write a placeholder prefix,
    # the header and the body while a second thread hashes the body (hashlib and file writes both let go
    # of the GIL), then the real prefix over the placeholder. The save waits for the slower of hashing
    # and writing, not their sum.
    start = fileobj.tell()
    fileobj.write(bytes(PREFIX_LEN))
    fileobj.write(header)
    with _hashing_thread(digest) as hash_parts:
        batch, size = [], 0
        for chunk in chunks:
            fileobj.write(chunk)
            batch.append(chunk)
            size += chunk.nbytes
            if size >= READ_CHUNK_BYTES:  # a task per batch: pieces of a page each would cost more to hand over
                hash_parts(batch)
                batch, size = [], 0
        hash_parts(batch)
    end = fileobj.tell()
    fileobj.seek(start)
    fileobj.write(PREFIX.pack(MAGIC, version, len(header), body_len, digest.digest()))
    fileobj.seek(end)
    return PREFIX_LEN + len(header) + body_len


def _seekable(fileobj) -> bool:
    seekable = getattr(fileobj, "seekable", None)
    return bool(seekable and seekable())


def _all_layers_full(payload: SlotPayload) -> bool:
    return all(layer.first_held == 0 for layer in payload.layers)


def _plan(identity: SlotIdentity, payload: SlotPayload) -> tuple[bytes, list[memoryview]]:
    """Validate the payload and return the header and the body's byte chunks."""
    if not payload.layers:
        raise ValueError("a slot has at least one layer")
    if len(payload.layers) != identity.n_layers:
        raise ValueError(
            f"payload has {len(payload.layers)} layers, identity says {identity.n_layers}"
        )
    positions = payload.layers[0].positions
    if positions == 0:
        raise ValueError("a slot holds at least one position")
    kv_dtype = np.dtype(identity.kv_dtype.numpy_dtype)
    chunks = [_as_le(_tokens(payload.tokens), np.dtype("<u4"), "tokens"),
              _as_le(payload.pending_logits, np.dtype("<f4"), "pending_logits")]
    first_held = []
    for index, layer in enumerate(payload.layers):
        if not 0 <= layer.first_held <= positions:
            raise ValueError(f"layer {index}: first_held {layer.first_held} beyond {positions}")
        want = (positions - layer.first_held, identity.n_kv_heads, identity.head_dim)
        for name, rows in (("k", layer.k), ("v", layer.v)):
            parts = [np.asarray(part) for part in _parts(rows)]
            shape = (sum(part.shape[0] for part in parts), *(parts[0].shape[1:] if parts else want[1:]))
            if shape != want or any(part.shape[1:] != want[1:] for part in parts):
                raise ValueError(f"layer {index} {name}: shape {shape}, expected {want} "
                                 f"(positions {positions}, first_held {layer.first_held})")
            chunks += [_as_le(part, kv_dtype, f"layer {index} {name}") for part in parts]
        first_held.append(int(layer.first_held))
    suffix = None if _all_layers_full(payload) else first_held
    header = build_header(identity, positions, len(payload.tokens),
                          len(payload.pending_logits), suffix)
    return header, [chunk for chunk in chunks if chunk.nbytes]


def _tokens(tokens: np.ndarray) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):
        raise ValueError(f"tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) > 0xFFFF_FFFF):
        raise ValueError("token ids must fit a u32")
    return tokens.astype("<u4", copy=False)


def _as_le(array: np.ndarray, dtype: np.dtype, label: str) -> memoryview:
    # Same kind and width required: a silent float64 -> float32 cast would
    # break the bit-for-bit round trip the format promises.
    array = np.asarray(array)
    if array.dtype.kind != dtype.kind or array.dtype.itemsize != dtype.itemsize:
        raise ValueError(f"{label}: dtype {array.dtype}, expected {dtype} for this slot")
    contiguous = np.ascontiguousarray(array, dtype=dtype)  # copies only if needed
    return memoryview(contiguous.reshape(-1)).cast("B") if contiguous.size else memoryview(b"")


def decode(buffer: bytes | bytearray | memoryview | mmap.mmap) -> UnverifiedSlot:
    """Check a slot file's framing, digest and header; raise SlotFormatError.

    Accepts anything exporting a byte buffer (an mmap included) and keeps a
    view of it: the payload later handed out by `verify` aliases it.
    """
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return _decode(view, lambda: hashlib.sha256(view[PREFIX_LEN:]).digest())


def _decode(view: memoryview, digest: Callable[[], bytes]) -> UnverifiedSlot:
    """`decode` of a byte view, given how to get the SHA-256 of everything past its prefix: computed
    here, or by a reader that hashed the bytes as they arrived (only called once the prefix checks hold,
    so a truncated file is still refused as truncated, not as corrupt)."""
    version, header_len, body_len, stored = check_prefix(view[:PREFIX_LEN], len(view))
    if digest() != stored:
        raise SlotFormatError(
            FormatCheck.DIGEST, "the SHA-256 does not match header+body: the file is corrupt"
        )
    header = parse_header(version, view[PREFIX_LEN:PREFIX_LEN + header_len], body_len)
    return UnverifiedSlot(header, view, body_offset=PREFIX_LEN + header_len)


def read_slot_file(path: Path, max_bytes: int | None = None) -> UnverifiedSlot:
    """Read a whole slot file into memory and decode it (`SlotReader`'s checks, then `decode`'s).

    For tools and tests that want the payload as arrays; a restore streams the file into the pool
    instead (`slots.slot_io.restore_file`). `UnverifiedSlot.file_bytes` is the byte count read.
    """
    with open_slot(path, max_bytes) as reader:
        # Uninitialised, not bytearray(n): that zero-fills every page before the read writes it again.
        view = memoryview(np.empty(reader.file_bytes, dtype=np.uint8))
        view[:PREFIX_LEN] = reader.prefix
        reader.read_into(view[PREFIX_LEN:])
        reader.finish()  # the digest, checked before the header is parsed
        return _decode(view, reader.digest)


@contextmanager
def _hashing_thread(digest) -> Iterator[Callable[[list[memoryview]], None]]:
    """Yield `hash_parts(views)`, which has `digest` updated with those bytes on a second thread, in the
    order given (one worker), while the caller writes the next ones: hashlib lets go of the GIL, so the two
    overlap. On leaving, every part is hashed (a failure re-raised); leaving by an exception (a failed
    write) drops the parts not yet hashed instead of waiting for them."""
    updates = []
    with ThreadPoolExecutor(1, thread_name_prefix="fslot-hash") as hasher:
        try:
            yield lambda parts: updates.append(hasher.submit(update_digest, digest, parts))
        except BaseException:
            hasher.shutdown(cancel_futures=True)
            raise
    for update in updates:
        update.result()
