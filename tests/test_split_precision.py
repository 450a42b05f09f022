"""Few-row calls on half-precision weight copies, many-row calls in float32 (models.split_precision)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models import split_precision
from models.loader import load_model
from models.split_precision import (SplitPrecisionLinear, attach_half_weights, choose_max_half_rows,
                                    measure_max_half_rows)


def test_calls_up_to_the_row_limit_use_the_half_copy_and_wider_calls_the_float32_weight():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16).float()  # float32 values that are exact in bf16
    split = SplitPrecisionLinear(linear, torch.bfloat16, max_half_rows=2)
    for rows in (1, 2):
        x = torch.randn(rows, 64)
        want = F.linear(x.bfloat16(), linear.weight.bfloat16(), linear.bias.bfloat16()).float()
        assert torch.equal(split(x), want)
    x = torch.randn(3, 64)
    assert torch.equal(split(x), F.linear(x, linear.weight, linear.bias))
    assert split(x).dtype == torch.float32 and split(x[:1]).dtype == torch.float32


def test_the_row_limit_is_the_last_row_count_before_half_precision_stops_winning():
    timings = {1: (1.0, 0.5), 2: (1.0, 0.6), 4: (1.0, 0.7), 8: (1.0, 1.2), 16: (1.0, 0.5)}
    assert choose_max_half_rows(timings) == 4, "a win after a loss (16 rows) does not count"
    assert choose_max_half_rows({1: (1.0, 0.97)}) == 0, "a near tie is not worth the memory"
    assert choose_max_half_rows({1: (1.0, 1.5)}) == 0


def test_measuring_on_a_real_weight_answers_a_candidate_row_count_or_zero():
    rows = measure_max_half_rows([torch.randn(256, 128) for _ in range(3)], torch.bfloat16)
    assert rows == 0 or rows in split_precision.CANDIDATE_ROWS


def test_nothing_is_attached_when_half_precision_never_wins(tiny_checkpoint):
    model = load_model(tiny_checkpoint("qwen3"), "float32")
    assert attach_half_weights(model, torch.bfloat16, max_half_rows=0) == 0
    assert not any(isinstance(m, SplitPrecisionLinear) for m in model.modules())


def test_every_linear_is_split_and_a_tied_head_still_shares_the_embedding(tiny_checkpoint):
    model = load_model(tiny_checkpoint("qwen3"), "float32")
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    assert attach_half_weights(model, torch.bfloat16, max_half_rows=1) == 1
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    assert model.lm_head.half_weight.dtype == torch.bfloat16


def test_auto_splits_only_where_it_chose_float32_over_a_half_checkpoint():
    assert split_precision.applies("auto", "bfloat16", "float32")
    assert not split_precision.applies("float32", "bfloat16", "float32")  # an explicit float32 opts out
    assert not split_precision.applies("auto", "bfloat16", "bfloat16")  # native bf16: nothing to split
    assert not split_precision.applies("auto", "float32", "float32")
