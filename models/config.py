"""What a checkpoint folder's config.json says, normalised into one ModelSpec.

Reading config.json is delegated to `transformers.AutoConfig`: it already knows
every family's defaults and upgrades old field names (`rope_theta`,
`rope_scaling`, `use_sliding_window`) into the v5 forms (`rope_parameters`,
`layer_types`). This module only turns that object into the flat facts our own
model code and the KV pool need, and refuses what we cannot serve *before*
anything large is loaded: a folder without config.json, an architecture we
have no model code for.

Not here: weights (loader.py), tokenizer (tokenizer.py), model code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class CheckpointError(Exception):
    """A checkpoint folder we refuse to serve; the message says why."""


# architecture name in config.json -> our family name
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "Qwen3ForCausalLM": "qwen3",
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Gemma3ForCausalLM": "gemma3",
}

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class ModelSpec:
    """The facts model code, pool and slots need; derived once at load."""

    family: str
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    # Per layer: FULL or SLIDING.
    layer_types: tuple[str, ...]
    # Window of SLIDING layers (a query at q sees keys k > q - window); None
    # when no layer is windowed.
    sliding_window: int | None
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    hidden_act: str
    # Gemma-only quirks; neutral values for the others.
    attn_scale: float  # multiplies q.k
    embed_scale: float  # multiplies embeddings
    norm_offset: float  # RMSNorm weight is (offset + w)
    sandwich_norms: bool  # Gemma's pre/post feed-forward norms
    final_logit_softcapping: float | None
    eos_token_ids: tuple[int, ...]
    hf_config: Any  # the transformers config, for RoPE init functions

    @property
    def windowed_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == SLIDING)

    @property
    def full_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL)


def read_architecture(model_dir: Path) -> tuple[str, str]:
    """(architecture, family) from config.json, refusing unknown ones."""
    cfg_path = Path(model_dir) / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{model_dir} has no config.json: not a Hugging Face model folder")
    try:
        raw = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{cfg_path} is not valid JSON: {exc}") from exc
    archs = raw.get("architectures") or []
    for arch in archs:
        if arch in SUPPORTED_ARCHITECTURES:
            return arch, SUPPORTED_ARCHITECTURES[arch]
    supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
    raise CheckpointError(
        f"unsupported architecture {archs or '(none given)'} in {cfg_path}; "
        f"anchorage supports: {supported}"
    )


def _layer_types(cfg: Any, family: str) -> tuple[str, ...]:
    n = cfg.num_hidden_layers
    types = getattr(cfg, "layer_types", None)
    if family == "mistral":
        # Mistral windows every layer when sliding_window is set (null = none);
        # its config carries no layer_types.
        window = getattr(cfg, "sliding_window", None)
        return tuple(SLIDING if window else FULL for _ in range(n))
    if types:
        types = tuple(types[:n])
        for t in types:
            if t not in (FULL, SLIDING):
                raise CheckpointError(f"layer type {t!r} is not supported (only {FULL}, {SLIDING})")
        return types
    return tuple(FULL for _ in range(n))


def _eos_ids(cfg: Any, model_dir: Path) -> tuple[int, ...]:
    ids: list[int] = []
    for source in (cfg.to_dict(), _generation_config(model_dir)):
        eos = source.get("eos_token_id")
        if eos is None:
            continue
        for i in eos if isinstance(eos, list) else [eos]:
            if i not in ids:
                ids.append(int(i))
    return tuple(ids)


def _generation_config(model_dir: Path) -> dict:
    path = Path(model_dir) / "generation_config.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def load_spec(model_dir: Path) -> ModelSpec:
    """Read and normalise a checkpoint's configuration (no weights)."""
    from transformers import AutoConfig  # heavy import, only when loading

    model_dir = Path(model_dir)
    arch, family = read_architecture(model_dir)
    try:
        cfg = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a bad config
        raise CheckpointError(f"could not read {model_dir / 'config.json'}: {exc}") from exc
    cfg = getattr(cfg, "text_config", cfg)

    layer_types = _layer_types(cfg, family)
    if getattr(cfg, "attn_logit_softcapping", None):
        raise CheckpointError("attention logit soft-capping is not supported by anchorage's attention")
    window = getattr(cfg, "sliding_window", None) if SLIDING in layer_types else None
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    gemma = family == "gemma3"
    return ModelSpec(
        family=family,
        architecture=arch,
        model_type=cfg.model_type,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads,
        num_kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
        head_dim=head_dim,
        intermediate_size=cfg.intermediate_size,
        rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings,
        layer_types=layer_types,
        sliding_window=int(window) if window else None,
        tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        # Qwen2 always biases q/k/v and never o; the others follow attention_bias.
        qkv_bias=family == "qwen2" or bool(getattr(cfg, "attention_bias", False)),
        o_bias=family != "qwen2" and bool(getattr(cfg, "attention_bias", False)),
        mlp_bias=bool(getattr(cfg, "mlp_bias", False)),
        qk_norm=family in ("qwen3", "gemma3"),
        hidden_act=getattr(cfg, "hidden_activation", None) or cfg.hidden_act,
        attn_scale=(cfg.query_pre_attn_scalar ** -0.5) if gemma else head_dim ** -0.5,
        embed_scale=cfg.hidden_size ** 0.5 if gemma else 1.0,
        norm_offset=1.0 if gemma else 0.0,
        sandwich_norms=gemma,
        final_logit_softcapping=getattr(cfg, "final_logit_softcapping", None) if gemma else None,
        eos_token_ids=_eos_ids(cfg, model_dir),
        hf_config=cfg,
    )
