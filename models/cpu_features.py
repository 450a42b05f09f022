"""What the CPU can compute natively, for choosing how to run bfloat16.

On CPUs with AVX512-BF16 or AMX, oneDNN multiplies bfloat16 matrices
natively and that is the fast path. On AVX2-only CPUs (many AMD EPYC and
older Intel parts, these build machines among them) bfloat16 GEMM is emulated
and several times slower than float32 for large batches: a 512-row prefill
chunk ran ~4.5x faster upcast to float32 there. So `wide_bf16_via_fp32()`
tells the model code to upcast when a matmul has many rows; single-row
decode stays in bfloat16, where the halved weight traffic wins.
"""

from __future__ import annotations

from functools import lru_cache

# Rows at or above which an emulated-bf16 matmul is done in float32.
UPCAST_MIN_ROWS = 48


@lru_cache(maxsize=1)
def native_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return True  # unknown platform: trust the library
    return "avx512_bf16" in flags or "amx_bf16" in flags


def wide_bf16_via_fp32() -> bool:
    return not native_bf16()
