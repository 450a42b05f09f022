"""bf16 Linear weights reordered into oneDNN's layout at load (CPUs with native bf16)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models import cpu_features, prepacked_linear
from models.loader import load_model
from models.model_runner import ModelRunner
from models.prepacked_linear import PrepackedLinear, prepack_linears
from runner_decode import greedy_decode

native_bf16 = pytest.mark.skipif(not prepacked_linear.applies("bfloat16"),
                                 reason="this CPU does not multiply bf16 natively (the model computes in float32)")


def test_it_applies_only_to_a_half_dtype_the_cpu_multiplies_natively(monkeypatch):
    monkeypatch.setattr(cpu_features, "_cpu_flags", lambda: "flags: fpu avx2 fma")
    assert not prepacked_linear.applies("bfloat16")
    monkeypatch.setattr(cpu_features, "_cpu_flags", lambda: "flags: avx2 avx512f avx512_bf16")
    assert prepacked_linear.applies("bfloat16") == torch.backends.mkldnn.is_available()
    assert not prepacked_linear.applies("float32")
    assert not prepacked_linear.applies("bfloat16", enabled=False)


@native_bf16
def test_every_untied_linear_is_reordered_and_a_tied_head_keeps_the_embeddings_weight(tiny_checkpoint):
    tied = load_model(tiny_checkpoint("qwen2", layers=2), "bfloat16")
    swapped = prepack_linears(tied)
    assert isinstance(tied.lm_head, nn.Linear) and tied.lm_head.weight is tied.model.embed_tokens.weight
    assert swapped == 2 * 7  # q, k, v, o, gate, up, down in each layer
    untied = load_model(tiny_checkpoint("qwen3", layers=2), "bfloat16")
    assert prepack_linears(untied) == 2 * 7 + 1
    assert isinstance(untied.lm_head, PrepackedLinear)


@native_bf16
def test_a_reordered_model_decodes_the_same_tokens_with_the_same_logits_as_the_plain_one(tiny_checkpoint):
    path = tiny_checkpoint("qwen3", sliding_window=16, layers=3)
    plain = ModelRunner(load_model(path, "bfloat16"), 16, {"full": 8, "window": 8})
    model = load_model(path, "bfloat16")
    prepack_linears(model)
    packed = ModelRunner(model, 16, {"full": 8, "window": 8})
    prompt = [(7 * j) % 500 + 20 for j in range(40)]
    a, seq_a = greedy_decode(plain, prompt, 12)
    b, seq_b = greedy_decode(packed, prompt, 12)
    assert seq_a == seq_b
    assert (a - b).abs().max().item() <= 0.02 * a.abs().max().item()
