"""Decode attention in half precision: PyTorch's SDPA against our grouped matmuls.

`models.paged_attention.decode_attention` skips SDPA for small bf16/fp16
decode batches because the CPU flash kernel is slow for one query row; this
script is the evidence for that and for HALF_MATMUL_MAX_KEYS, rerun on the
machine at hand. For each (batch, key length) it gathers K/V from a shuffled
page pool, as a decode step does, runs both paths on the same inputs, and
prints the median microseconds of each, their ratio and the largest
difference of the outputs. Shapes default to the
benchmark model's attention (16 query heads, 8 KV heads, head size 128).

    .venv/bin/python -m bench.attention_decode [--dtype bfloat16] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from models.paged_attention import HALF_MATMUL_MAX_KEYS, gather_pages, matmul_decode_attention

PAGE = 16
SHAPES = [(1, 64), (1, 512), (1, 4096), (1, 8192), (2, 2048), (4, 1024),
          (8, 128), (8, 512), (16, 256), (32, 64), (32, 512)]  # (batch, keys)


def _median_us(fn, repeats: int) -> float:
    fn()  # first call allocates; not timed
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    h, kvh, d = args.heads, args.kv_heads, args.head_dim
    scale = d ** -0.5
    print(f"decode_attention takes the matmul path up to batch x keys = {HALF_MATMUL_MAX_KEYS}")
    print(f"{'batch':>5} {'keys':>5} {'sdpa us':>9} {'ours us':>9} {'sdpa/ours':>9} {'max diff':>9}")
    for b, keys in SHAPES:
        n = keys // PAGE
        k_pages = torch.randn(b * n, PAGE, kvh, d, dtype=dtype)  # [pages, page, KVH, D]
        v_pages = torch.randn_like(k_pages)
        pages = torch.randperm(b * n).view(b, n)  # [B, n] scattered, as in a long-lived pool
        q = torch.randn(b, h, d, dtype=dtype)  # [B, H, D]
        mask = torch.rand(b, 1, 1, keys) < 0.9  # [B, 1, 1, L]
        mask[..., -1] = True  # a decode row always sees its own key

        def sdpa():
            k, v = gather_pages(k_pages, pages), gather_pages(v_pages, pages)  # [B, KVH, L, D]
            o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=True)
            return o.squeeze(2)

        def ours():
            return matmul_decode_attention(q, gather_pages(k_pages, pages), gather_pages(v_pages, pages), mask, scale)

        diff = (sdpa().float() - ours().float()).abs().max().item()
        t_sdpa, t_ours = _median_us(sdpa, args.repeats), _median_us(ours, args.repeats)
        print(f"{b:>5} {keys:>5} {t_sdpa:>9.0f} {t_ours:>9.0f} {t_sdpa / t_ours:>9.2f} {diff:>9.4f}")


if __name__ == "__main__":
    main()
