"""The .fslot format: round trips, seed compatibility, and every refusal by name."""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import struct
import tracemalloc

import numpy as np
import pytest

from slots.fslot import (
    MAX_SLOT_FILE_BYTES,
    READABLE_FORMAT_VERSIONS,
    LayerKV,
    SlotFormatError,
    SlotPayload,
    check_size,
    decode,
    encode,
    read_slot_file,
    write_to,
)
from slots.identity import IdentityMismatch, KvDtype, SlotIdentity

PREFIX_LEN = 56
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def identity(dtype: str = "f32") -> SlotIdentity:
    return SlotIdentity("llama", 2, 2, 3, dtype, "deadbeef")


def payload(dtype: str = "f32", first_held: tuple[int, int] = (0, 0)) -> SlotPayload:
    layers = []
    for layer, first in enumerate(first_held):
        held = 5 - first
        base = np.arange(held * 6).reshape(held, 2, 3) + layer * 100
        if dtype == "bf16":
            # Raw bit patterns, NaN and -0 included: carried, never converted.
            k = (base * 977 + 0x7FC1).astype(np.uint16)
            v = (base * 331 + 0x8000).astype(np.uint16)
        else:
            k = (base * 0.37 - 3).astype(NUMPY[dtype])
            v = (-base * 1.13 + 0.5).astype(NUMPY[dtype])
            if dtype == "f32" and held:
                k[0, 0, :] = [np.nan, -0.0, np.float32(1e-45)]  # NaN, -0, denormal
        layers.append(LayerKV(k=k, v=v, first_held=first))
    return SlotPayload(
        tokens=np.array([1, 2, 3, 4, 5], dtype=np.uint32),
        pending_logits=np.array([0.5, -1.5, 2.25], dtype=np.float32),
        layers=layers,
    )


def restamp(data: bytes | bytearray) -> bytearray:
    """Recompute the digest so the only thing wrong is whatever was edited."""
    data = bytearray(data)
    header_len = struct.unpack_from("<I", data, 12)[0]
    data[24:PREFIX_LEN] = hashlib.sha256(data[PREFIX_LEN:]).digest()
    assert header_len <= len(data)
    return data


def set_header_u32(data: bytes, field: int, value: int) -> bytearray:
    data = bytearray(data)
    struct.pack_into("<I", data, PREFIX_LEN + 4 * field, value)
    return restamp(data)


def seed_writer(ident: SlotIdentity, slot: SlotPayload) -> bytes:
    """An independent writer of the seed's version-1 layout, field by field."""
    name, fp = ident.model_name.encode(), ident.fingerprint.encode()
    tag = {"f32": 0, "f16": 1, "bf16": 2}[ident.kv_dtype]
    header = struct.pack("<9I", len(slot.layers), ident.n_kv_heads, ident.head_dim, tag,
                         slot.layers[0].k.shape[0], len(slot.tokens), len(slot.pending_logits),
                         len(name), len(fp)) + name + fp
    body = b"".join(struct.pack("<I", int(t)) for t in slot.tokens)
    body += b"".join(struct.pack("<f", float(x)) for x in slot.pending_logits)
    element = {"f32": "<f", "f16": "<e", "bf16": "<H"}[ident.kv_dtype]
    for layer in slot.layers:
        for array in (layer.k, layer.v):
            body += b"".join(struct.pack(element, x) for x in array.reshape(-1).tolist())
    digest = hashlib.sha256(header + body).digest()
    return b"FRXSLOT1" + struct.pack("<IIQ", 1, len(header), len(body)) + digest + header + body


def assert_same_payload(got: SlotPayload, want: SlotPayload) -> None:
    assert got.tokens.dtype == np.uint32 and got.tokens.tolist() == want.tokens.tolist()
    assert got.pending_logits.tobytes() == want.pending_logits.tobytes()
    assert len(got.layers) == len(want.layers)
    for g, w in zip(got.layers, want.layers):
        assert g.first_held == w.first_held and g.positions == w.positions
        assert g.k.shape == w.k.shape and g.v.shape == w.v.shape
        # Bytes, not values: NaN payloads and -0.0 must survive too.
        assert g.k.tobytes() == w.k.tobytes() and g.v.tobytes() == w.v.tobytes()


def refusal(data) -> SlotFormatError:
    with pytest.raises(SlotFormatError) as caught:
        decode(data)
    return caught.value


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_a_slot_round_trips_through_the_file_bit_for_bit(dtype):
    data = encode(identity(dtype), payload(dtype))
    decoded = decode(data)
    assert decoded.identity == identity(dtype)
    assert decoded.format_version == 1 and decoded.positions == 5 and decoded.n_tokens == 5
    assert_same_payload(decoded.verify(identity(dtype)), payload(dtype))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_windowed_layer_holding_a_suffix_round_trips_as_version_2(dtype):
    slot = payload(dtype, first_held=(0, 3))
    decoded = decode(encode(identity(dtype), slot))
    assert decoded.format_version == 2
    restored = decoded.verify(identity(dtype))
    assert [layer.k.shape[0] for layer in restored.layers] == [5, 2]
    assert_same_payload(restored, slot)


def test_a_version_2_file_stores_only_the_held_positions():
    full = encode(identity(), payload(first_held=(0, 0)))
    suffix = encode(identity(), payload(first_held=(0, 3)))
    # 3 released positions x (K + V) x 6 floats x 4 bytes, minus 2 u32 first_held.
    assert len(full) - len(suffix) == 3 * 2 * 6 * 4 - 2 * 4


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_the_writer_emits_the_seed_layout_byte_for_byte(dtype):
    assert encode(identity(dtype), payload(dtype)) == seed_writer(identity(dtype), payload(dtype))


def test_a_file_from_an_independent_seed_layout_writer_decodes():
    restored = decode(seed_writer(identity(), payload())).verify(identity())
    assert_same_payload(restored, payload())


def test_the_readable_versions_are_an_explicit_set():
    assert READABLE_FORMAT_VERSIONS == frozenset({1, 2})


def test_a_slot_saved_under_another_checkpoint_is_refused_by_name():
    serving = SlotIdentity("llama", 2, 2, 3, KvDtype.F32, "0badf00d")
    with pytest.raises(IdentityMismatch) as caught:
        decode(encode(identity(), payload())).verify(serving)
    assert caught.value.field == "checkpoint"
    assert "deadbeef" in str(caught.value) and "0badf00d" in str(caught.value)


def test_a_slot_of_another_shape_is_refused_naming_the_field():
    serving = SlotIdentity("llama", 28, 2, 3, KvDtype.F32, "deadbeef")
    with pytest.raises(IdentityMismatch) as caught:
        decode(encode(identity(), payload())).verify(serving)
    assert (caught.value.field, caught.value.ours, caught.value.theirs) == ("n_layers", 2, 28)


def test_a_truncated_file_is_refused_before_it_is_parsed():
    data = encode(identity(), payload())
    assert refusal(data[:-8]).check == "truncated"
    assert refusal(data[:PREFIX_LEN - 1]).check == "too_short"


def test_bytes_after_the_declared_body_are_refused():
    assert refusal(encode(identity(), payload()) + b"\0").check == "trailing_bytes"


def test_a_file_with_another_magic_is_refused():
    data = bytearray(encode(identity(), payload()))
    data[:8] = b"ggsq\0\0\0\0"
    assert refusal(data).check == "magic"


def test_a_flipped_float_is_caught_by_the_digest():
    data = bytearray(encode(identity(), payload()))
    data[-1] ^= 0xFF
    error = refusal(data)
    assert error.check == "digest" and "'digest'" in str(error)


def test_a_header_that_contradicts_its_own_body_is_refused():
    assert refusal(set_header_u32(encode(identity(), payload()), 0, 7)).check == "body_length"


@pytest.mark.parametrize("version", [0, 3, 99])
def test_an_unknown_format_version_is_refused_rather_than_guessed_at(version):
    data = bytearray(encode(identity(), payload()))
    struct.pack_into("<I", data, 8, version)
    error = refusal(data)
    assert error.check == "version" and str(version) in str(error)


def test_an_implausible_position_count_is_refused_by_arithmetic_not_by_allocating():
    data = set_header_u32(encode(identity(), payload()), 4, 0xFFFF_FFFF)
    assert refusal(data).check == "body_length"


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [(3, 9, "dtype"), (0, 0, "no_layers"), (1, 0, "shape"), (2, 0, "shape"),
     (4, 0, "no_positions"), (7, 3, "header_strings"), (8, 5000, "header_strings")],
)
def test_a_header_field_out_of_range_is_refused_by_its_own_check(field, value, check):
    assert refusal(set_header_u32(encode(identity(), payload()), field, value)).check == check


def test_a_header_shorter_than_its_fixed_fields_is_refused():
    data = bytearray(encode(identity(), payload()))
    struct.pack_into("<IQ", data, 12, 8, len(data) - PREFIX_LEN - 8)
    assert refusal(restamp(data)).check == "header_too_short"


def test_a_model_name_that_is_not_utf8_is_refused():
    data = bytearray(encode(SlotIdentity("ab", 2, 2, 3, "f32", "deadbeef"), payload()))
    data[PREFIX_LEN + 36] = 0xFF
    assert refusal(restamp(data)).check == "utf8"


def test_a_layer_claiming_to_start_past_its_positions_is_refused():
    data = encode(identity(), payload(first_held=(0, 3)))
    assert refusal(set_header_u32(data, 9 + 1, 6)).check == "first_held"


def test_a_version_2_header_claiming_more_layers_than_it_can_hold_is_refused():
    data = encode(identity(), payload(first_held=(0, 3)))
    assert refusal(set_header_u32(data, 0, 1 << 30)).check == "header_too_short"


def test_the_payload_is_a_view_of_the_file_not_a_copy():
    data = encode(identity(), payload())
    restored = decode(data).verify(identity())
    whole = np.frombuffer(data, dtype=np.uint8)
    assert np.shares_memory(restored.layers[1].v, whole)
    assert np.shares_memory(restored.tokens, whole)


def test_a_slot_decodes_from_an_mmap(tmp_path):
    path = tmp_path / "a.fslot"
    path.write_bytes(encode(identity("f16"), payload("f16")))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        restored = decode(mapped).verify(identity("f16"))
        assert_same_payload(restored, payload("f16"))
        del restored  # the views pin the map; drop them before it closes


def test_write_to_streams_the_same_bytes_and_counts_them():
    out = io.BytesIO()
    written = write_to(out, identity("bf16"), payload("bf16", first_held=(2, 0)))
    assert out.getvalue() == encode(identity("bf16"), payload("bf16", first_held=(2, 0)))
    assert written == len(out.getvalue())


def test_write_to_streams_without_concatenating_the_body():
    big = payload("f32")
    big.layers = [LayerKV(np.ones((4096, 16, 32), np.float32), np.ones((4096, 16, 32), np.float32))
                  for _ in range(2)]
    sizes = []

    class Sink:
        def write(self, chunk):
            sizes.append(len(memoryview(chunk).cast("B")))

    tracemalloc.start()
    written = write_to(Sink(), SlotIdentity("llama", 2, 16, 32, "f32", "deadbeef"), big)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert written == sum(sizes) > 16 * 2**20
    assert peak < 2**20, peak  # 16 MiB of KV written with under 1 MiB allocated


def test_the_writer_refuses_kv_of_another_dtype_than_the_identity_says():
    slot = payload("f32")
    slot.layers[0].k = slot.layers[0].k.astype(np.float64)
    with pytest.raises(ValueError, match="layer 0 k: dtype float64"):
        encode(identity("f32"), slot)


def test_the_writer_refuses_layers_that_disagree_on_positions():
    slot = payload("f32")
    slot.layers[1] = LayerKV(slot.layers[1].k[:4], slot.layers[1].v[:4], first_held=0)
    with pytest.raises(ValueError, match="layer 1 k: shape"):
        encode(identity("f32"), slot)


def test_an_oversized_file_is_refused_before_it_is_read():
    check_size(MAX_SLOT_FILE_BYTES)
    with pytest.raises(SlotFormatError) as caught:
        check_size(MAX_SLOT_FILE_BYTES + 1)
    assert caught.value.check == "too_large"


def test_read_slot_file_reads_decodes_and_counts_bytes(tmp_path):
    path = tmp_path / "s.fslot"
    data = encode(identity(), payload(first_held=(0, 1)))
    path.write_bytes(data)
    slot = read_slot_file(path)
    assert slot.file_bytes == len(data)
    assert_same_payload(slot.verify(identity()), payload(first_held=(0, 1)))


def test_read_slot_file_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.fslot"
    os.mkfifo(fifo)
    with pytest.raises(SlotFormatError) as caught:
        read_slot_file(fifo)
    assert caught.value.check == "not_a_file"


def test_a_large_file_that_is_no_slot_file_is_refused_from_its_prefix_without_being_read_whole(tmp_path):
    import tracemalloc

    stray = tmp_path / "stray.fslot"
    with open(stray, "wb") as f:
        f.write(b"not a slot file")
        f.truncate(64 * 2**20)  # sparse: 64 MiB on paper
    tracemalloc.start()
    try:
        with pytest.raises(SlotFormatError) as caught:
            read_slot_file(stray)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.check == "magic"
    assert peak < 2**20, f"{peak} bytes allocated to refuse it"


def test_a_slot_file_whose_lengths_disagree_with_its_size_is_refused_from_its_prefix(tmp_path):
    path = tmp_path / "s.fslot"
    data = encode(identity(), payload())
    path.write_bytes(data + b"\0" * 1000)
    with pytest.raises(SlotFormatError) as caught:
        read_slot_file(path)
    assert caught.value.check == "trailing_bytes"


def test_a_file_over_the_servers_own_limit_is_refused_on_the_size_of_what_was_opened(tmp_path):
    path = tmp_path / "s.fslot"
    data = encode(identity(), payload())
    path.write_bytes(data)
    assert read_slot_file(path, max_bytes=len(data)).file_bytes == len(data)
    with pytest.raises(SlotFormatError) as caught:
        read_slot_file(path, max_bytes=len(data) - 1)
    assert caught.value.check == "too_large" and "--max-slot-file-bytes" in str(caught.value)


def test_a_file_that_shrinks_while_it_is_read_is_refused_as_truncated_and_never_read_past_its_end(tmp_path,
                                                                                              monkeypatch):
    path = tmp_path / "s.fslot"
    data = encode(identity(), payload())
    path.write_bytes(data)
    whole = os.stat(path)
    os.truncate(path, len(data) - 100)  # cut after its size was taken: the descriptor still says the old size
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: whole if real_fstat(fd).st_ino == whole.st_ino else real_fstat(fd))
    with pytest.raises(SlotFormatError) as caught:
        read_slot_file(path)
    assert caught.value.check == "truncated"


def test_a_file_read_in_many_chunks_is_hashed_whole_while_it_is_read(tmp_path, monkeypatch):
    import slots.fslot_reader as fslot_reader

    path = tmp_path / "s.fslot"
    data = encode(identity(), payload(first_held=(0, 1)))
    path.write_bytes(data)
    monkeypatch.setattr(fslot_reader, "READ_CHUNK_BYTES", 7)  # a chunk boundary inside the header and body
    hashed = []
    real = fslot_reader.update_digest
    monkeypatch.setattr(fslot_reader, "update_digest",
                        lambda digest, views: (hashed.extend(bytes(v) for v in views), real(digest, views)))
    slot = read_slot_file(path)
    assert b"".join(hashed) == data[PREFIX_LEN:] and len(hashed) > 10
    assert_same_payload(slot.verify(identity()), payload(first_held=(0, 1)))


@pytest.mark.parametrize("where", ["first_chunk_after_the_prefix", "a_middle_chunk", "the_last_byte"])
def test_a_flipped_byte_in_any_chunk_of_the_read_is_caught_by_the_digest(tmp_path, monkeypatch, where):
    import slots.fslot_reader as fslot_reader

    data = bytearray(encode(identity(), payload()))
    at = {"first_chunk_after_the_prefix": PREFIX_LEN + 1, "a_middle_chunk": len(data) // 2,
          "the_last_byte": len(data) - 1}[where]
    data[at] ^= 0x01
    path = tmp_path / "s.fslot"
    path.write_bytes(bytes(data))
    monkeypatch.setattr(fslot_reader, "READ_CHUNK_BYTES", 16)
    with pytest.raises(SlotFormatError) as caught:
        read_slot_file(path)
    assert caught.value.check == "digest"


def test_a_seekable_file_and_a_stream_get_the_same_bytes_wherever_the_file_starts():
    streamed = []

    class Stream:  # no seek: the writer hashes first, then writes
        def write(self, chunk):
            streamed.append(bytes(memoryview(chunk).cast("B")))

    written = write_to(Stream(), identity("bf16"), payload("bf16", first_held=(2, 0)))
    out = io.BytesIO()
    out.write(b"already here")
    assert write_to(out, identity("bf16"), payload("bf16", first_held=(2, 0))) == written
    assert out.getvalue() == b"already here" + b"".join(streamed)
    assert out.tell() == len(out.getvalue())  # left at the end, as a stream would be
    assert decode(b"".join(streamed)).verify(identity("bf16")).positions == 5


def test_a_write_that_fails_midway_raises_the_write_error_itself():
    class Full(io.BytesIO):
        def write(self, chunk):
            if self.tell() > PREFIX_LEN + 100:
                raise OSError(28, "No space left on device")
            return super().write(chunk)

    with pytest.raises(OSError, match="No space"):
        write_to(Full(), identity(), payload())
