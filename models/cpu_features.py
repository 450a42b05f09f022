"""What the CPU computes natively, for choosing the dtype the model computes in.

On CPUs with AVX512-BF16 or AMX, oneDNN multiplies bfloat16 natively and
bf16 weights are the fast path. On AVX2-only CPUs (many AMD EPYC and older
Intel parts, these build machines among them) bf16 and fp16 matmuls are
emulated: measured here, a single-row bf16 GEMV ran ~2.5x slower than the
same GEMV on float32 weights, and a 512-row prefill GEMM ~4.5x slower. So
`compute_dtype("auto", "bfloat16")` answers float32 on such CPUs: weights are
held (and every activation computed) in float32, while the KV pool and slot
files keep the requested dtype, so memory for context and the slot file
format do not change with the machine.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def native_half(dtype: str) -> bool:
    """Does this CPU multiply `dtype` ("bfloat16" / "float16") natively?"""
    flags = _cpu_flags()
    if not flags:
        return True  # unknown platform: trust the library
    if dtype == "bfloat16":
        return "avx512_bf16" in flags or "amx_bf16" in flags
    if dtype == "float16":
        return "avx512_fp16" in flags or "amx_fp16" in flags
    return True


def compute_dtype(requested: str, storage: str) -> str:
    """The dtype the model computes in: `requested`, or for "auto" the storage
    dtype when the CPU has it natively, else float32."""
    if requested != "auto":
        return requested
    return storage if storage == "float32" or native_half(storage) else "float32"
