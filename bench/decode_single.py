"""Single-stream decode: our model runner against transformers' `generate`, side by side.

Same checkpoint (Qwen3-0.6B shape, random bf16 weights), same 32-token
prompt, same number of greedy new tokens, in one process, alternating the
two so machine noise hits both. Prints tokens/s of each (median of repeats)
and the ratio. Not a test: timings on a shared machine are noisy.

    .venv/bin/python -m bench.decode_single [--new-tokens 128] [--repeats 3] [--threads N] [--compute-dtype auto|float32|bfloat16]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from bench.checkpoints import qwen3_06b
from models.cpu_features import compute_dtype
from models.model_runner import ModelRunner
from scheduler.forward_batch import ForwardBatch, SeqChunk
from server.runtime import build_runtime
from server.settings import ServeSettings


def ours(runner: ModelRunner, prompt: list[int], new_tokens: int) -> float:
    table = list(range(-(-(len(prompt) + new_tokens) // runner.page_size)))
    t0 = time.perf_counter()
    logits = runner.step(ForwardBatch([SeqChunk(0, prompt, 0, table, [], True)]))
    seq = prompt + [int(logits[0].argmax())]
    while len(seq) - len(prompt) < new_tokens:
        logits = runner.step(ForwardBatch([SeqChunk(0, [seq[-1]], len(seq) - 1, table, [], True)]))
        seq.append(int(logits[0].argmax()))
    return new_tokens / (time.perf_counter() - t0)


def hf(model, prompt: list[int], new_tokens: int) -> float:
    cfg = copy.deepcopy(model.generation_config)
    cfg.eos_token_id, cfg.pad_token_id, cfg.max_new_tokens, cfg.do_sample = [model.config.vocab_size], 0, new_tokens, False
    t0 = time.perf_counter()
    with torch.inference_mode():
        model.generate(torch.tensor([prompt]), generation_config=cfg)
    return new_tokens / (time.perf_counter() - t0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--compute-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="what `anchorage serve --compute-dtype` would run (auto: the CPU's rule)")
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM

    path = qwen3_06b()
    torch.set_num_threads(args.threads)
    # What `anchorage serve --dtype bfloat16` runs, loaded as the server loads it: the compute dtype the
    # CPU supports natively (float32 on AVX2-only CPUs) over a bf16 KV pool, and the load-time weight
    # treatments (reordered bf16 weights, tied head included; or half copies where bf16 is emulated).
    compute = compute_dtype(args.compute_dtype, "bfloat16")
    settings = ServeSettings(model=path, dtype="bfloat16", compute_dtype=args.compute_dtype, threads=args.threads,
                             max_model_len=1024, kv_cache_tokens=1024 + 16)
    runner: ModelRunner = build_runtime(settings)[3]
    half_rows = max((getattr(m, "max_half_rows", 0) for m in runner.model.modules()), default=0)
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    prompt = list(range(1000, 1032))
    ours(runner, prompt, 8), hf(ref, prompt, 8)  # warm up both
    a, b = [], []
    for _ in range(args.repeats):
        a.append(ours(runner, prompt, args.new_tokens))
        b.append(hf(ref, prompt, args.new_tokens))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"machine: {torch.get_num_threads()} torch threads; Qwen3-0.6B shape, bf16 checkpoint "
          f"(anchorage computes in {compute}{f', bf16 for calls of <= {half_rows} rows' if half_rows else ''}, KV bf16; generate in bf16), 32-token prompt, "
          f"{args.new_tokens} new tokens, median of {args.repeats}")
    print(f"anchorage runner      {ma:7.2f} tok/s   runs {[round(x, 2) for x in a]}")
    print(f"transformers generate {mb:7.2f} tok/s   runs {[round(x, 2) for x in b]}")
    print(f"ratio anchorage/generate: {ma / mb:.2f}x")


if __name__ == "__main__":
    main()
