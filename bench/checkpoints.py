"""Benchmark checkpoints: random weights in the shape of Qwen3-0.6B, bf16.

Weights cannot be downloaded here, and throughput does not depend on what the
weights are, only on their shapes: hidden 1024, 28 layers, 16 heads, 8 KV
heads, head_dim 128, intermediate 3072, vocab 151936, tied embeddings. The
tokenizer is the tiny Qwen one (a few hundred tokens); benchmarks send token
ids or ignore EOS, so its size does not matter. A windowed variant (window
128 on all layers but the first) serves the anchor benchmarks. Built once
into the benchmark's work folder and reused.

The work folder (checkpoints, GGUF files, the peers' venvs and llama.cpp's
build) is a per-user cache, `$ANCHORAGE_BENCH_WORK` or else
`$XDG_CACHE_HOME/anchorage/bench` (`~/.cache/anchorage/bench`), not a folder of
the checkout: it holds gigabytes and an hour of compiling that a fresh clone
of the repository should reuse, as pip reuses its wheel cache.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _work_folder() -> Path:
    if os.environ.get("ANCHORAGE_BENCH_WORK"):
        return Path(os.environ["ANCHORAGE_BENCH_WORK"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "anchorage" / "bench"


WORK = _work_folder()

QWEN3_06B = dict(
    hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
    intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
    tie_word_embeddings=True, rms_norm_eps=1e-6,
)


def qwen3_06b(windowed: bool = False, window: int = 128) -> Path:
    name = f"qwen3-0.6b-shape{'-swa' + str(window) if windowed else ''}"
    out = WORK / name
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from models.tiny_checkpoint import build_tiny_checkpoint

    tmp = WORK / (name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tiny = build_tiny_checkpoint("qwen3", tmp / "tiny")
    extra = dict(use_sliding_window=True, sliding_window=window, max_window_layers=1) if windowed else {}
    cfg = Qwen3Config(**QWEN3_06B, **extra, architectures=["Qwen3ForCausalLM"], eos_token_id=1, bos_token_id=0)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(tmp / "model")
    for f in tiny.iterdir():
        if f.name.startswith("tokenizer") or f.name.endswith(".jinja"):
            shutil.copy(f, tmp / "model" / f.name)
    (tmp / "model").rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return out
