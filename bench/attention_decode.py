"""Decode attention in half precision: PyTorch's SDPA against our grouped matmuls, per layout.

`models.paged_attention.decode_attention` skips SDPA for most bf16/fp16 decode
steps because the CPU flash kernel is slow for one query row. Several
sequences go to batched matmuls over contiguous copies of K and V, a few rows
to a chunk (`rows_per_chunk`), or through the matmuls a sequence at a time on
the gathered view (long spans). This script shows the kernels behind those
rules and HALF_MATMUL_MAX_KEYS / HALF_MATMUL_CHUNK_KEYS, rerun on the machine
at hand; the chunk size itself was chosen on engine steps (the figures are in
decode_attention's docstring), where kernel timings alone ranked the rules
differently. For each (batch, key length) it gathers K/V from a shuffled page
pool, as a decode step does, and prints the fastest of interleaved runs, in
microseconds, of: SDPA on the gathered view and on contiguous copies, the
batched matmuls on the view and on copies, the matmuls a row at a time on the
view, and decode_attention itself (with the path it took); then the largest
difference between SDPA's output and decode_attention's. Shapes default to
the benchmark model's attention (16 query heads, 8 KV heads, head size 128).

    .venv/bin/python -m bench.attention_decode [--dtype bfloat16] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from models import paged_attention
from models.paged_attention import (HALF_MATMUL_CHUNK_KEYS, HALF_MATMUL_MAX_KEYS, decode_attention, gather_pages,
                                    matmul_decode_attention)

PAGE = 16
SHAPES = [(1, 64), (1, 512), (1, 4096), (1, 8192), (2, 256), (2, 2048), (4, 1024),
          (8, 80), (8, 128), (8, 512), (16, 256), (32, 64), (32, 128), (32, 512)]  # (batch, keys)


def _best_us(fns: list, repeats: int) -> list[float]:
    """The fastest of `repeats` runs of each of `fns`, in microseconds, the runs interleaved: on a shared
    machine the median of back-to-back runs of one path moved by up to 2x between invocations, while the
    fastest of interleaved runs held still."""
    for fn in fns:
        fn()  # first call allocates; not timed
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return [t * 1e6 for t in best]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    h, kvh, d = args.heads, args.kv_heads, args.head_dim
    scale = d ** -0.5
    print(f"decode_attention: one sequence by matmuls up to {HALF_MATMUL_MAX_KEYS} keys, SDPA past that; several "
          f"by batched matmuls over copies in chunks of at most {HALF_MATMUL_CHUNK_KEYS} key positions (two rows "
          "while a span fits), a row at a time for longer spans")
    print(f"{'batch':>5} {'keys':>5} {'sdpa view':>10} {'sdpa copy':>10} {'mm view':>10} {'mm copy':>10} "
          f"{'mm by row':>10} {'taken':>8} {'taken us':>9} {'max diff':>9}")
    for b, keys in SHAPES:
        n = keys // PAGE
        k_pages = torch.randn(b * n, PAGE, kvh, d, dtype=dtype)  # [pages, page, KVH, D]
        v_pages = torch.randn_like(k_pages)
        pages = torch.randperm(b * n).view(b, n)  # [B, n] scattered, as in a long-lived pool
        q = torch.randn(b, h, d, dtype=dtype)  # [B, H, D]
        mask = torch.rand(b, 1, 1, keys) < 0.9  # [B, 1, 1, L]
        mask[..., -1] = True  # a decode row always sees its own key

        def gathered(copy: bool):
            k, v = gather_pages(k_pages, pages), gather_pages(v_pages, pages)  # [B, KVH, L, D] views
            return (k.contiguous(), v.contiguous()) if copy else (k, v)

        def sdpa(copy: bool):
            k, v = gathered(copy)
            return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, scale=scale,
                                                  enable_gqa=True).squeeze(2)

        def matmuls(copy: bool):
            return matmul_decode_attention(q, *gathered(copy), mask, scale)

        def by_rows():
            k, v = gathered(False)
            return torch.cat([matmul_decode_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], mask[i:i + 1], scale)
                              for i in range(b)])

        def taken():
            return decode_attention(q, *gathered(False), mask, scale)

        path = []
        real = paged_attention.matmul_decode_attention
        paged_attention.matmul_decode_attention = lambda *a: path.append(1) or real(*a)
        try:
            diff = (sdpa(True).float() - taken().float()).abs().max().item()
        finally:
            paged_attention.matmul_decode_attention = real
        *times, chosen = _best_us([lambda: sdpa(False), lambda: sdpa(True), lambda: matmuls(False),
                                   lambda: matmuls(True), by_rows, taken], args.repeats)
        print(f"{b:>5} {keys:>5} " + " ".join(f"{t:>10.0f}" for t in times)
              + f" {'matmul' if path else 'sdpa':>8} {chosen:>9.0f} {diff:>9.4f}")


if __name__ == "__main__":
    main()
