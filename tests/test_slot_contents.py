"""A slot file's contents are checked against the server before any page is allocated (slots.slot_io)."""

from __future__ import annotations

import numpy as np
import pytest

from slots.fslot import LayerKV, SlotPayload
from slots.slot_io import RestoreError, check_contents


def _payload(n: int = 32, kv_dtype: str = "<f4", tokens: list[int] | None = None) -> SlotPayload:
    kv = np.zeros((n, 2, 4), dtype=kv_dtype)  # [positions, kv heads, head dim]
    return SlotPayload(np.array(tokens or list(range(n)), dtype="<u4"), np.zeros(0, dtype="<f4"),
                       [LayerKV(kv.copy(), kv.copy()), LayerKV(kv.copy(), kv.copy())])


def test_a_sound_slot_passes():
    check_contents(_payload(), vocab_size=100, n_ctx=64)


def test_a_token_id_outside_the_vocabulary_is_refused_by_its_value():
    with pytest.raises(RestoreError, match="token id 120, outside the vocabulary"):
        check_contents(_payload(tokens=[1] * 31 + [120]), vocab_size=100, n_ctx=64)


def test_a_slot_as_long_as_the_context_is_refused_since_no_request_could_follow_it():
    check_contents(_payload(n=63), vocab_size=100, n_ctx=64)
    with pytest.raises(RestoreError, match="64 tokens, and this server's context is 64"):
        check_contents(_payload(n=64), vocab_size=100, n_ctx=64)


@pytest.mark.parametrize("kv_dtype, bad", [("<f4", np.nan), ("<f2", np.inf), ("<u2", 0x7F80), ("<u2", 0xFFC1)],
                         ids=["f32 NaN", "f16 inf", "bf16 inf", "bf16 negative NaN"])
def test_kv_holding_nan_or_inf_is_refused_naming_the_layer(kv_dtype, bad):
    payload = _payload(kv_dtype=kv_dtype)
    payload.layers[1].k[5, 1, 2] = bad
    with pytest.raises(RestoreError, match="layer 1 K holds NaN or infinite"):
        check_contents(payload, vocab_size=100, n_ctx=64)
    finite = _payload(kv_dtype=kv_dtype)
    finite.layers[1].k[5, 1, 2] = 0x7F7F if kv_dtype == "<u2" else 65504  # the largest finite value
    check_contents(finite, vocab_size=100, n_ctx=64)
