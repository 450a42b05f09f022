"""Build tiny, random, complete Hugging Face checkpoints for tests and demos.

What it is for: `build_tiny_checkpoint("qwen3", out_dir)` writes a folder that
`AutoModelForCausalLM` / `AutoTokenizer` load fully offline -- config.json,
generation_config.json, safetensors weights (sharded on request), a locally
trained byte-level BPE tokenizer and a chat template in the family's style --
for qwen3, qwen2, llama3, mistral and gemma3. Each family exercises the code
paths its real checkpoints need: Qwen2 q/k/v biases and tied embeddings; Qwen3
and Gemma 3 q/k norms and a head_dim that differs from hidden/heads; the llama3
RoPE scaling type; Mistral's all-layer window; Gemma 3's 5:1 window pattern,
per-layer-type RoPE (linear scaling on full layers), query_pre_attn_scalar,
(1 + w) norms and sqrt(hidden) embedding scale. `template="harmony"` pairs
qwen3 weights with a gpt-oss-style harmony tokenizer and template. `main` is
the CLI (`python -m models.tiny_checkpoint --family qwen3 --out DIR`).

What it is not for: anything a real model is needed for. Weights are random;
text is gibberish. Windows: qwen3/qwen2 with `sliding_window` W use
`use_sliding_window` and `max_window_layers=1` (layer 0 full, the rest
windowed); mistral windows every layer; gemma3 always windows 5 of 6 layers and
uses W = GEMMA3_DEFAULT_WINDOW (16) when none is given, because a Gemma 3
without windows does not exist.

Why so: weights are drawn per parameter from a generator seeded by
(seed, parameter name), independent of transformers' init order, with
std 1.0: the default 0.02 init makes greedy decoding repeat one token, which
hides bugs in anything that compares token streams. The same arguments give
the same bytes, so fixtures can cache builds on disk.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedConfig

from models.tiny_tokenizer import FLAVOURS, build_tokenizer

# Bump whenever a change here, in tiny_tokenizer.py or in chat_templates/ would
# change what a build writes: on-disk caches of builds are keyed on it.
BUILDER_VERSION = 1

GEMMA3_DEFAULT_WINDOW = 16
MAX_POSITIONS = 4096
LLAMA3_ORIGINAL_POSITIONS = 1024  # < MAX_POSITIONS, so llama3 scaling has all three bands
WEIGHT_STD = 1.0  # varied greedy output; see the module docstring
BIAS_STD = 0.5
NORM_STD = 0.1
QK_NORM_GAIN = 2.0  # q/k norm scale: sharper attention than 1, so attention mixes less
SCALED_EMBED_RMS = 0.25  # Gemma's embedding after its sqrt(hidden) scale
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TEMPLATES = ("default", "harmony")
_TEMPLATE_DIR = Path(__file__).with_name("chat_templates")


@dataclass(frozen=True)
class Family:
    architecture: str
    flavour: str  # tokenizer flavour in models.tiny_tokenizer.FLAVOURS
    template: str  # chat_templates/<template>.jinja
    default_layers: int
    wide_heads: bool  # default head_dim = 2 * hidden / heads, as in Qwen3-0.6B / Gemma 3
    tied: bool
    norm_offset: bool  # RMSNorm computes x * (1 + w): w near 0, not near 1
    scaled_embedding: bool = False  # the model multiplies embeddings by sqrt(hidden)


FAMILIES: dict[str, Family] = {
    "qwen3": Family("Qwen3ForCausalLM", "qwen", "qwen3", 2, wide_heads=True, tied=False, norm_offset=False),
    "qwen2": Family("Qwen2ForCausalLM", "qwen", "qwen2", 2, wide_heads=False, tied=True, norm_offset=False),
    "llama3": Family("LlamaForCausalLM", "llama3", "llama3", 2, wide_heads=False, tied=False, norm_offset=False),
    "mistral": Family("MistralForCausalLM", "mistral", "mistral", 2, wide_heads=False, tied=False, norm_offset=False),
    "gemma3": Family(
        "Gemma3ForCausalLM", "gemma", "gemma3", 6, wide_heads=True, tied=True, norm_offset=True, scaled_embedding=True
    ),
}


def build_tiny_checkpoint(
    family: str,
    out_dir: Path,
    *,
    layers: int | None = None,
    hidden: int = 64,
    sliding_window: int | None = None,
    seed: int = 0,
    dtype: str = "float32",
    template: str = "default",
    max_shard_size: str | None = None,
    vocab_size: int | None = None,
    intermediate: int | None = None,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int | None = None,
) -> Path:
    """Write a complete, loadable checkpoint folder for `family` into `out_dir` and return it.

    `vocab_size` is the tokenizer's target length (default ~768); the model's
    vocab is always the tokenizer's actual length.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {sorted(FAMILIES)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; expected one of {TEMPLATES}")
    if template == "harmony" and family != "qwen3":
        raise ValueError("template='harmony' is built on qwen3 weights only")
    spec = FAMILIES[family]
    flavour, template_name = ("harmony", "harmony") if template == "harmony" else (spec.flavour, spec.template)

    chat_template = (_TEMPLATE_DIR / f"{template_name}.jinja").read_text(encoding="utf-8")
    tokenizer = build_tokenizer(flavour, vocab_size, chat_template)
    tokenizer.model_max_length = MAX_POSITIONS
    config = _config(
        family,
        tokenizer,
        layers=layers if layers is not None else spec.default_layers,
        hidden=hidden,
        sliding_window=sliding_window,
        intermediate=intermediate if intermediate is not None else 2 * hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim if head_dim is not None else (2 if spec.wide_heads else 1) * hidden // heads,
        dtype=dtype,
    )
    model = AutoModelForCausalLM.from_config(config)
    embed_std = SCALED_EMBED_RMS / hidden**0.5 if spec.scaled_embedding else WEIGHT_STD
    _randomise(model, seed, norm_offset=spec.norm_offset, embed_std=embed_std)
    model = model.to(DTYPES[dtype])
    stops = [tokenizer.convert_tokens_to_ids(t) for t in FLAVOURS[flavour].stops]
    # Greedy by default (no sampling fields): callers' tests stay deterministic.
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=stops, pad_token_id=config.pad_token_id
    )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_kwargs = {"max_shard_size": max_shard_size} if max_shard_size is not None else {}
    model.save_pretrained(out_dir, **save_kwargs)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _config(
    family: str,
    tokenizer,
    *,
    layers: int,
    hidden: int,
    sliding_window: int | None,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
) -> PreTrainedConfig:
    """The family's transformers config class, filled in for a tiny model."""
    from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    if heads % kv_heads != 0:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if hidden % heads != 0 or head_dim % 2 != 0:
        raise ValueError(f"hidden ({hidden}) must divide by heads ({heads}) and head_dim ({head_dim}) be even")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be positive, got {sliding_window}")
    spec = FAMILIES[family]
    common = dict(
        architectures=[spec.architecture],
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=WEIGHT_STD,
        rms_norm_eps=1e-6,
        tie_word_embeddings=spec.tied,
        # Qwen tokenizers have no BOS token; their configs name <|endoftext|> as bos.
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype=dtype,
    )
    if family in ("qwen3", "qwen2"):
        if family == "qwen2" and head_dim != hidden // heads:
            raise ValueError("qwen2 has no head_dim setting: head_dim must be hidden // heads")
        windowed = sliding_window is not None
        extra = dict(head_dim=head_dim, attention_bias=False) if family == "qwen3" else {}
        cls = Qwen3Config if family == "qwen3" else Qwen2Config
        return cls(
            **common,
            **extra,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
            use_sliding_window=windowed,
            sliding_window=sliding_window,
            # transformers derives layer_types: index >= max_window_layers is windowed.
            max_window_layers=1 if windowed else layers,
        )
    if family == "llama3":
        llama3_rope = {
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": MAX_POSITIONS / LLAMA3_ORIGINAL_POSITIONS,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": LLAMA3_ORIGINAL_POSITIONS,
        }
        return LlamaConfig(**common, head_dim=head_dim, rope_parameters=llama3_rope)
    if family == "mistral":
        rope = {"rope_type": "default", "rope_theta": 1_000_000.0}
        return MistralConfig(**common, head_dim=head_dim, rope_parameters=rope, sliding_window=sliding_window)
    window = sliding_window if sliding_window is not None else GEMMA3_DEFAULT_WINDOW
    return Gemma3TextConfig(
        **common,
        head_dim=head_dim,
        # Differs from head_dim (as in Gemma 3 27B), so a head_dim**-0.5 scale is caught.
        query_pre_attn_scalar=hidden // heads,
        sliding_window=window,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)],
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        hidden_activation="gelu_pytorch_tanh",
    )


@torch.no_grad()
def _randomise(model: torch.nn.Module, seed: int, *, norm_offset: bool, embed_std: float) -> None:
    """Overwrite every parameter from a generator seeded by (seed, name).

    Norm weights stay near their identity value (1, or 0 for (1 + w) norms) so
    activations stay finite in bfloat16; q/k norms scale by QK_NORM_GAIN.
    Biases are nonzero so a dropped bias shows up in a logit comparison.
    Gemma needs both the q/k gain and a small `embed_std`: it normalises every
    sublayer's output, so flat attention adds nearly the same vector at every
    position, and with tied weights a strong embedding makes each token predict
    itself -- either way greedy decoding repeats one token.
    """
    for name, param in model.named_parameters():
        digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
        noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
        if "norm" in name:
            gain = QK_NORM_GAIN if ("q_norm" in name or "k_norm" in name) else 1.0
            value = noise * NORM_STD + (gain - 1.0 if norm_offset else gain)
        elif name.endswith(".bias"):
            value = noise * BIAS_STD
        elif "embed_tokens" in name:
            value = noise * embed_std
        else:
            value = noise * WEIGHT_STD
        param.copy_(value.to(param.dtype))


def main(argv: list[str] | None = None) -> int:
    """CLI: build one tiny checkpoint and print its folder."""
    parser = argparse.ArgumentParser(prog="tiny-checkpoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--out", required=True, type=Path, help="folder to write (created if missing)")
    parser.add_argument("--layers", type=int, default=None, help="default: 6 for gemma3, 2 otherwise")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--sliding-window", type=int, default=None, metavar="W")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--template", choices=TEMPLATES, default="default", help="harmony: qwen3 only")
    parser.add_argument("--max-shard-size", default=None, help="e.g. 50KB, to get a sharded checkpoint")
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the CLI's output is the folder path, nothing else
    try:
        out = build_tiny_checkpoint(
            args.family,
            args.out,
            layers=args.layers,
            hidden=args.hidden,
            sliding_window=args.sliding_window,
            seed=args.seed,
            dtype=args.dtype,
            template=args.template,
            max_shard_size=args.max_shard_size,
        )
    except ValueError as err:
        parser.error(str(err))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
