"""Few-row matmuls on the checkpoint's half-precision weights, many-row ones in float32.

What it is for: on CPUs without native bf16/fp16 math (AVX2 only, these
build machines among them) the model is held and computed in float32
(models.cpu_features), because emulated half-precision GEMM is several times
slower for prefill chunks and batched decode. But a decode step of one
sequence is a one-row product, bound by memory bandwidth, not arithmetic:
float32 weights make it read twice the bytes of the bf16 checkpoint, and
torch's few-row bf16 kernels widen in registers. Measured on the Qwen3-0.6B
shape at 2 threads (`python -m bench.decode_single --threads 2`): one stream
decodes at 3.75 tok/s in float32 and 6.3-7.1 tok/s with these copies (the
load measurement chose them for calls of up to 4 or 8 rows).

`attach_half_weights(model, dtype)` gives every Linear a half-precision copy
of its weight (the checkpoint's own values: float32 was widened from them, so
narrowing again is exact) and routes a call with at most `max_half_rows`
rows to it, everything wider to the float32 weight. `max_half_rows` is
measured at load with the thread count the server will run, because the
crossover moves with the CPU, its memory bandwidth and the threads. It is
measured on passes over the model's own per-layer weights, enough of them to
overflow the caches as a real step does: one weight alone stays in L3 after
the first call, and there float32 wins even for one row (the first version
of this calibration timed one weight and flipped between 0 and 8 rows from
run to run). When no row count is faster in half precision nothing is
attached and no memory is spent; a model small enough to live in cache
(the demo model) is such a case.

Costs, and why they are accepted: the copies add half the float32 weights'
memory again; and a sequence's decode steps compute in bf16 while few rows
are in the batch and in float32 otherwise, so greedy output can depend on
what else is running (as it can in llama.cpp and vLLM). `--compute-dtype
float32` opts out of both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.linear_swap import swap_linears

log = logging.getLogger(__name__)

CANDIDATE_ROWS = (1, 2, 4, 8, 16, 32)
# The half path must win by this much: a tie is not worth the memory.
REQUIRED_SPEEDUP = 1.08


class SplitPrecisionLinear(nn.Module):
    """A Linear whose calls of at most `max_half_rows` rows run on a half-precision copy."""

    def __init__(self, linear: nn.Linear, half_dtype: torch.dtype, max_half_rows: int):
        super().__init__()
        self.weight = linear.weight  # float32, possibly column-major, possibly tied to the embedding
        self.bias = linear.bias
        # Row-major [out, in]: torch's one-row half kernel reads each output's weights contiguously.
        self.register_buffer("half_weight", linear.weight.detach().to(half_dtype).contiguous(), persistent=False)
        half_bias = None if linear.bias is None else linear.bias.detach().to(half_dtype)
        self.register_buffer("half_bias", half_bias, persistent=False)
        self.max_half_rows = max_half_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in] float32 -> [..., out] float32 on either path
        rows = x.numel() // x.shape[-1]
        if rows <= self.max_half_rows:
            return F.linear(x.to(self.half_weight.dtype), self.half_weight, self.half_bias).to(x.dtype)
        return F.linear(x, self.weight, self.bias)


def _fastest_of_each(a: Callable[[], object], b: Callable[[], object], reps: int = 5) -> tuple[float, float]:
    """Best wall time of `a` and of `b` over `reps` alternating calls, after one warm-up of each.

    Alternating spreads a neighbour's burst of load over both, and the minimum is
    what the CPU can do when it is not disturbed: a shared machine makes any one
    call slow, rarely all of them.
    """
    a(), b()
    best_a = best_b = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        best_a, best_b = min(best_a, t1 - t0), min(best_b, t2 - t1)
    return best_a, best_b


def choose_max_half_rows(timings: dict[int, tuple[float, float]]) -> int:
    """From {rows: (float32 seconds, half seconds)} in increasing rows: the largest row count up to which
    half precision wins by REQUIRED_SPEEDUP at every measured count (0: it never does)."""
    best = 0
    for rows in sorted(timings):
        t_full, t_half = timings[rows]
        if t_half * REQUIRED_SPEEDUP > t_full:
            break
        best = rows
    return best


@torch.inference_mode()
def measure_max_half_rows(weights: list[torch.Tensor], half_dtype: torch.dtype) -> int:
    """Time a pass over `weights` both ways for each candidate row count, stopping at the first loss.

    A pass multiplies by every weight once, in turn, as a forward does: the
    weights together must exceed the CPU's caches, or the timing measures
    cache-resident products, where float32 always wins (see _streaming_sample).
    """
    halves = [w.detach().to(half_dtype).contiguous() for w in weights]
    timings: dict[int, tuple[float, float]] = {}
    for rows in CANDIDATE_ROWS:
        x = torch.randn(rows, weights[0].shape[1])
        xh = x.to(half_dtype)

        def full_pass():
            for w in weights:
                F.linear(x, w)

        def half_pass():
            for h in halves:
                F.linear(xh, h).float()

        timings[rows] = _fastest_of_each(full_pass, half_pass)
        if choose_max_half_rows(timings) < rows:
            break
    log.debug("float32 vs %s seconds per pass by rows: %s", half_dtype, timings)
    return choose_max_half_rows(timings)


def applies(requested: str, storage: str, compute: str) -> bool:
    """`--compute-dtype auto` chose float32 over a half-precision checkpoint: the case the copies are for."""
    return requested == "auto" and storage in ("bfloat16", "float16") and compute == "float32"


# Bytes of float32 weights one calibration pass streams: several times any L3 cache.
STREAM_BYTES = 256 * 2**20


def _streaming_sample(model: nn.Module) -> list[torch.Tensor]:
    """Weights of the largest per-layer Linear shape (the head excluded), from successive layers, until
    they hold STREAM_BYTES: what a decode step streams from memory, not what a cache holds."""
    linears = [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.endswith("lm_head")]
    shape = max((m.weight.shape for m in linears), key=lambda s: s[0] * s[1])
    sample, total = [], 0
    for m in linears:
        if m.weight.shape == shape and total < STREAM_BYTES:
            sample.append(m.weight)
            total += m.weight.numel() * m.weight.element_size()
    return sample


def attach_half_weights(model: nn.Module, half_dtype: torch.dtype, max_half_rows: int | None = None) -> int:
    """Swap every Linear for a SplitPrecisionLinear; returns the row limit (0: nothing attached).

    `max_half_rows` None measures it (measure_max_half_rows); tests pass it.
    """
    if max_half_rows is None:
        max_half_rows = measure_max_half_rows(_streaming_sample(model), half_dtype)
    if max_half_rows <= 0:
        return 0
    swap_linears(model, lambda linear: SplitPrecisionLinear(linear, half_dtype, max_half_rows))
    return max_half_rows
