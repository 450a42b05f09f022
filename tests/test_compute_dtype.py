"""Computing in float32 over a bfloat16 KV pool, and on half weight copies for few rows (CPUs without native bf16)."""

from __future__ import annotations

import torch

from models import cpu_features
from models.loader import load_model
from models.model_runner import ModelRunner
from models.split_precision import attach_half_weights
from runner_decode import greedy_decode


def test_auto_computes_in_the_storage_dtype_only_where_the_cpu_has_it_natively(monkeypatch):
    monkeypatch.setattr(cpu_features, "_cpu_flags", lambda: "flags: fpu avx2 fma")
    assert cpu_features.compute_dtype("auto", "bfloat16") == "float32"
    assert cpu_features.compute_dtype("auto", "float16") == "float32"
    monkeypatch.setattr(cpu_features, "_cpu_flags", lambda: "flags: avx2 avx512f avx512_bf16 amx_bf16")
    assert cpu_features.compute_dtype("auto", "bfloat16") == "bfloat16"
    assert cpu_features.compute_dtype("bfloat16", "float32") == "bfloat16"  # an explicit choice wins
    assert cpu_features.compute_dtype("auto", "float32") == "float32"


def test_a_bf16_kv_pool_under_float32_compute_stays_close_to_an_all_float32_run(tiny_checkpoint):
    path = tiny_checkpoint("qwen3", sliding_window=16, layers=3)
    model = load_model(path, "float32")
    full = ModelRunner(model, 16, {"full": 8, "window": 8})
    narrow_kv = ModelRunner(model, 16, {"full": 8, "window": 8}, torch.bfloat16)
    assert narrow_kv.kv[0][0].dtype == torch.bfloat16 and narrow_kv.kv_dtype_name == "bf16"
    prompt = [(7 * j) % 500 + 20 for j in range(40)]
    a, _ = greedy_decode(full, prompt, 10)
    b, _ = greedy_decode(narrow_kv, prompt, 10)
    scale = a.abs().max().item()
    assert (a - b).abs().max().item() < 0.03 * scale
    assert not torch.equal(a, b), "the bf16 pool should round something"


def test_decoding_one_sequence_on_half_weight_copies_stays_close_to_float32(tiny_checkpoint):
    path = tiny_checkpoint("qwen3", sliding_window=16, layers=3)
    plain = ModelRunner(load_model(path, "float32"), 16, {"full": 8, "window": 8}, torch.bfloat16)
    model = load_model(path, "float32")
    attach_half_weights(model, torch.bfloat16, max_half_rows=1)
    split = ModelRunner(model, 16, {"full": 8, "window": 8}, torch.bfloat16)
    prompt = [(7 * j) % 500 + 20 for j in range(40)]
    a, _ = greedy_decode(plain, prompt, 8)
    b, _ = greedy_decode(split, prompt, 8)
    scale = a.abs().max().item()
    assert (a - b).abs().max().item() < 0.05 * scale
    assert not torch.equal(a[1:], b[1:]), "one-row decode steps should have run in bf16"
