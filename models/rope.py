"""Rotary position embeddings, one table per layer type.

The inverse frequencies come from transformers' own RoPE initialisers
(`ROPE_INIT_FUNCTIONS`): llama3, linear and yarn scaling are subtle enough
that re-deriving them would be a source of parity bugs, and the initialiser is
pure math on the config. Gemma 3 gives each layer type its own base, which is
why there is one `Rotary` per type.

RoPE variants whose frequencies depend on the running sequence length
(dynamic NTK, longrope) are refused: a paged cache stores keys already
rotated, so frequencies must not change after the fact.
"""

from __future__ import annotations

import torch

from models.config import CheckpointError, ModelSpec

_STATIC_TYPES = {"default", "linear", "llama3", "yarn", "proportional"}


def _rope_params(spec: ModelSpec, layer_type: str) -> dict:
    params = getattr(spec.hf_config, "rope_parameters", None) or {}
    if layer_type in params and isinstance(params[layer_type], dict):
        return params[layer_type]  # per-type table (Gemma 3)
    return params


class Rotary:
    """cos/sin for given positions; `apply` rotates q or k in place of HF's rotate_half."""

    def __init__(self, spec: ModelSpec, layer_type: str):
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        params = _rope_params(spec, layer_type)
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in _STATIC_TYPES:
            raise CheckpointError(f"rope type {rope_type!r} is not supported (supported: {sorted(_STATIC_TYPES)})")
        kwargs = {"layer_type": layer_type} if "layer_types" in spec.hf_config.to_dict() else {}
        if rope_type == "default":
            base = params.get("rope_theta", 10000.0)
            dim = spec.head_dim
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device="cpu") / dim))
            scaling = 1.0
        else:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](spec.hf_config, torch.device("cpu"), **kwargs)
        self.inv_freq = inv_freq.float()  # [head_dim / 2]
        self.scaling = float(scaling)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # positions: [T] -> cos, sin: [T, 1, head_dim] (broadcast over heads)
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.scaling).to(dtype)
        sin = (emb.sin() * self.scaling).to(dtype)
        return cos[:, None, :], sin[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, head_dim]; HF's half-split convention (rotate_half).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin
