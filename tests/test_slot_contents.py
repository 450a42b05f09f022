"""A slot file's contents are checked against the server before its pages are cached (slots.slot_io)."""

from __future__ import annotations

import numpy as np
import pytest

from slots.slot_io import RestoreError, check_finite, check_tokens


def test_sound_tokens_pass():
    check_tokens(np.arange(32, dtype="<u4"), 32, vocab_size=100, n_ctx=64)


def test_a_token_id_outside_the_vocabulary_is_refused_by_its_value():
    with pytest.raises(RestoreError, match="token id 120, outside the vocabulary"):
        check_tokens(np.array([1] * 31 + [120], dtype="<u4"), 32, vocab_size=100, n_ctx=64)


def test_a_slot_as_long_as_the_context_is_refused_since_no_request_could_follow_it():
    check_tokens(np.arange(63, dtype="<u4"), 63, vocab_size=100, n_ctx=64)
    with pytest.raises(RestoreError, match="64 tokens, and this server's context is 64"):
        check_tokens(np.arange(64, dtype="<u4"), 64, vocab_size=100, n_ctx=64)


def test_the_length_checked_is_what_the_kv_covers_when_the_file_holds_more_tokens():
    check_tokens(np.arange(70, dtype="<u4"), 40, vocab_size=100, n_ctx=64)


@pytest.mark.parametrize("kv_dtype, bad", [("<f4", np.nan), ("<f2", np.inf), ("<u2", 0x7F80), ("<u2", 0xFFC1)],
                         ids=["f32 NaN", "f16 inf", "bf16 inf", "bf16 negative NaN"])
def test_kv_holding_nan_or_inf_is_refused_naming_the_layer_and_which_half(kv_dtype, bad):
    rows = np.zeros((32, 2, 4), dtype=kv_dtype)  # [positions, kv heads, head dim]
    rows[5, 1, 2] = bad
    with pytest.raises(RestoreError, match="layer 1 K holds NaN or infinite"):
        check_finite(rows, 1, "K")
    rows[5, 1, 2] = 0x7F7F if kv_dtype == "<u2" else 65504  # the largest finite value
    check_finite(rows, 1, "K")
