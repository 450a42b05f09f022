"""Hostile .fslot files: decode answers SlotFormatError or a sound slot, and
never allocates more than the file it was given."""

from __future__ import annotations

import hashlib
import struct
import tracemalloc

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slots.fslot import LayerKV, SlotFormatError, SlotPayload, decode, encode
from slots.identity import IdentityMismatch, SlotIdentity

PREFIX_LEN = 56
# Headroom for Python objects decode creates (views, the header record, the
# identity strings, at most 4 KiB each): constant, whatever the file says.
ALLOCATION_SLACK = 64 * 1024
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def valid_file(dtype: str, first_held: tuple[int, ...]) -> bytes:
    rng = np.random.default_rng(len(first_held))
    n_kv_heads, head_dim, positions = 2, 4, 6
    numpy_dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[dtype]
    layers = []
    for first in first_held:
        shape = (positions - first, n_kv_heads, head_dim)
        k = rng.integers(0, 1 << 16, size=shape).astype(numpy_dtype)
        layers.append(LayerKV(k=k, v=k[::-1].copy(), first_held=first))
    slot = SlotPayload(tokens=np.arange(positions, dtype=np.uint32),
                       pending_logits=np.linspace(-1, 1, 7, dtype=np.float32), layers=layers)
    ident = SlotIdentity("tiny", len(layers), n_kv_heads, head_dim, dtype, "ab" * 32)
    return encode(ident, slot)


VALID_FILES = [valid_file("f32", (0, 0)), valid_file("f16", (0, 2, 0)),
               valid_file("bf16", (3, 0)), valid_file("f32", (0, 6, 5, 1))]


def restamp(data: bytearray) -> bytearray:
    data[24:PREFIX_LEN] = hashlib.sha256(data[PREFIX_LEN:]).digest()
    return data


def decode_within_file_size(data: bytes) -> None:
    """Decode `data` and, if it decodes, take its payload; any error other than
    the format's own, or an allocation beyond the file, fails the test."""
    tracemalloc.start()
    try:
        try:
            slot = decode(data)
        except SlotFormatError:
            return
        payload = slot.verify(slot.identity)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(data) + ALLOCATION_SLACK, (peak, len(data))
    # A file that decodes is internally consistent: its views cover the body.
    held = sum(layer.k.nbytes + layer.v.nbytes for layer in payload.layers)
    assert held + payload.tokens.nbytes + payload.pending_logits.nbytes <= len(data)
    for layer in payload.layers:
        assert layer.k.shape == layer.v.shape
        assert layer.positions == slot.positions
    # ...and verifying against another checkpoint still refuses it by name.
    other = SlotIdentity(slot.identity.model_name, slot.identity.n_layers,
                         slot.identity.n_kv_heads, slot.identity.head_dim,
                         slot.identity.kv_dtype, slot.identity.fingerprint + "x")
    try:
        slot.verify(other)
    except IdentityMismatch as mismatch:
        assert mismatch.field == "checkpoint"
    else:
        raise AssertionError("a slot verified against another fingerprint")


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_are_refused_only_with_slot_format_errors(data):
    decode_within_file_size(data)


@FUZZ
@given(st.sampled_from([1, 2, 3]), st.binary(max_size=400))
def test_random_bytes_behind_a_valid_magic_are_refused_only_with_slot_format_errors(version, rest):
    decode_within_file_size(b"FRXSLOT1" + struct.pack("<I", version) + rest)


@FUZZ
@given(st.sampled_from(VALID_FILES), st.data())
def test_bit_flips_truncations_and_extensions_are_refused_cleanly(original, data):
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] ^= 1 << data.draw(st.integers(0, 7))
    cut = data.draw(st.integers(0, len(mutated)))
    mutated = mutated[:cut] + data.draw(st.binary(max_size=64))
    if bytes(mutated) != original:
        try:
            decode(bytes(mutated))
        except SlotFormatError:
            pass
        else:
            # Only a re-stamped digest can vouch for edited bytes.
            raise AssertionError("an edited file decoded without a re-stamped digest")
    decode_within_file_size(bytes(mutated))


U32 = st.one_of(st.integers(0, 8), st.sampled_from([0xFFFF_FFFF, 1 << 31, 1 << 30, 4096]),
                st.integers(0, 0xFFFF_FFFF))


@FUZZ
@given(st.sampled_from(VALID_FILES), st.lists(st.tuples(st.integers(0, 13), U32), max_size=3))
def test_rewritten_header_fields_under_a_restamped_digest_are_refused_cleanly(original, edits):
    mutated = bytearray(original)
    header_len = struct.unpack_from("<I", mutated, 12)[0]
    for field, value in edits:
        at = PREFIX_LEN + 4 * field
        if at + 4 <= PREFIX_LEN + header_len:
            struct.pack_into("<I", mutated, at, value)
    decode_within_file_size(bytes(restamp(mutated)))


@FUZZ
@given(st.sampled_from(VALID_FILES), st.integers(0, 0xFFFF_FFFF), st.integers(0, (1 << 64) - 1))
def test_rewritten_lengths_in_the_prefix_are_refused_cleanly(original, header_len, body_len):
    mutated = bytearray(original)
    struct.pack_into("<IQ", mutated, 12, header_len, body_len)
    decode_within_file_size(bytes(restamp(mutated)))
