"""One decoder-only transformer, with the family differences as ModelSpec flags.

Qwen3, Qwen2/2.5, Llama 3.x, Mistral and Gemma 3 text are the same network up
to a handful of switches (q/k norms, biases, sandwich norms, embedding scale,
norm offset, activation, per-layer-type RoPE and windows), so one module with
those switches beats five near-copies. Module and parameter names mirror the
Hugging Face checkpoints (`model.layers.3.self_attn.q_proj.weight`), so the
loader can match keys strictly, one to one.

The forward pass takes a flattened ragged batch (`[T]` tokens from many
sequences) and the per-step attention plans; it never sees a padded batch.
"""

from __future__ import annotations

import torch
from torch import nn

from models.config import FULL, SLIDING, ModelSpec
from models.layers import MLP, make_norm
from models.paged_attention import GroupPlan, paged_attention
from models.rope import Rotary, apply_rotary


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer_type: str):
        super().__init__()
        h, d = spec.hidden_size, spec.head_dim
        self.n_heads, self.n_kv, self.head_dim = spec.num_heads, spec.num_kv_heads, d
        self.q_proj = nn.Linear(h, self.n_heads * d, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(h, self.n_kv * d, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(h, self.n_kv * d, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * d, h, bias=spec.o_bias)
        gemma = spec.norm_offset != 0.0
        if spec.qk_norm:
            self.q_norm = make_norm(gemma, d, spec.rms_norm_eps)
            self.k_norm = make_norm(gemma, d, spec.rms_norm_eps)
        self.qk_norm = spec.qk_norm
        self.scale = spec.attn_scale
        self.layer_type = layer_type

    def forward(self, x, cos, sin, k_pages, v_pages, plan: GroupPlan):
        # x: [T, hidden]
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.n_heads, self.head_dim)  # [T, H, D]
        k = self.k_proj(x).view(t, self.n_kv, self.head_dim)  # [T, KVH, D]
        v = self.v_proj(x).view(t, self.n_kv, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = paged_attention(q, k, v, k_pages, v_pages, plan, self.scale)  # [T, H, D]
        return self.o_proj(out.reshape(t, self.n_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, layer_type: str):
        super().__init__()
        gemma = spec.norm_offset != 0.0
        self.self_attn = Attention(spec, layer_type)
        self.mlp = MLP(spec.hidden_size, spec.intermediate_size, spec.hidden_act, spec.mlp_bias)
        self.input_layernorm = make_norm(gemma, spec.hidden_size, spec.rms_norm_eps)
        self.post_attention_layernorm = make_norm(gemma, spec.hidden_size, spec.rms_norm_eps)
        self.sandwich = spec.sandwich_norms
        if self.sandwich:
            self.pre_feedforward_layernorm = make_norm(gemma, spec.hidden_size, spec.rms_norm_eps)
            self.post_feedforward_layernorm = make_norm(gemma, spec.hidden_size, spec.rms_norm_eps)

    def forward(self, x, cos, sin, k_pages, v_pages, plan):
        if self.sandwich:  # Gemma: norm both sides of each sub-block
            h = self.post_attention_layernorm(
                self.self_attn(self.input_layernorm(x), cos, sin, k_pages, v_pages, plan)
            )
            x = x + h
            h = self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
            return x + h
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, k_pages, v_pages, plan)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    """`model.*` in the checkpoint."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec, t) for t in spec.layer_types)
        self.norm = make_norm(spec.norm_offset != 0.0, spec.hidden_size, spec.rms_norm_eps)


class CausalLM(nn.Module):
    """The whole network; `forward` returns logits only for the rows asked."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.model = DecoderModel(spec)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # RoPE tables are constants, built on the CPU even when the loader
        # builds the parameters on the meta device.
        with torch.device("cpu"):
            self.rotary = {t: Rotary(spec, t) for t in set(spec.layer_types)}

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        kv: list[tuple[torch.Tensor, torch.Tensor]],  # per layer (k_pages, v_pages)
        plans: dict[str, GroupPlan],  # per layer type
        logit_rows: torch.Tensor,  # [S] rows whose logits are needed
    ) -> torch.Tensor:
        spec = self.spec
        x = self.model.embed_tokens(input_ids)  # [T, hidden]
        if spec.embed_scale != 1.0:
            x = x * torch.tensor(spec.embed_scale, dtype=x.dtype)
        rope = {t: r.cos_sin(positions, x.dtype) for t, r in self.rotary.items()}
        for i, layer in enumerate(self.model.layers):
            t = spec.layer_types[i]
            cos, sin = rope[t]
            k_pages, v_pages = kv[i]
            x = layer(x, cos, sin, k_pages, v_pages, plans[t])
        x = self.model.norm(x[logit_rows])  # [S, hidden]
        logits = self.lm_head(x)  # [S, vocab]
        if spec.final_logit_softcapping:
            cap = spec.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits


__all__ = ["CausalLM", "FULL", "SLIDING"]
