"""Small building blocks shared by every family: RMSNorm and the gated MLP.

Each mirrors the arithmetic order of the transformers implementation it
replaces (where the float32 upcast happens, when the weight is applied),
because in bfloat16 that order decides whether greedy tokens match.
Parameter names mirror Hugging Face checkpoints (`weight`, `gate_proj`, ...).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.config import CheckpointError


class RMSNorm(nn.Module):
    """Llama/Qwen style: normalise in float32, cast back, then multiply by w."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class GemmaRMSNorm(nn.Module):
    """Gemma style: weight stored as an offset from 1, applied in float32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


def make_norm(gemma: bool, dim: int, eps: float) -> nn.Module:
    return GemmaRMSNorm(dim, eps) if gemma else RMSNorm(dim, eps)


def activation(name: str):
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    raise CheckpointError(f"activation {name!r} is not supported (silu, gelu, gelu_pytorch_tanh)")


class MLP(nn.Module):
    """down(act(gate(x)) * up(x))."""

    def __init__(self, hidden: int, intermediate: int, act: str, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [T, hidden] -> [T, hidden]
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
