"""Load a Hugging Face checkpoint folder into our CausalLM, strictly.

Strict means every tensor in the safetensors files has exactly one home in the
model and every parameter gets exactly one tensor, with the shape the config
promises; anything else fails naming the key. A silently ignored tensor is how
a checkpoint of the wrong family "loads" and then emits garbage.

Single files (`model.safetensors`) and sharded checkpoints
(`model.safetensors.index.json`) are both read. The model is built on the
meta device and parameters are assigned from the files, so loading a large
checkpoint costs one read of the weights, not an extra random initialisation.

Not here: the tokenizer (tokenizer.py), the KV pool (model_runner.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from models.config import CheckpointError, ModelSpec, load_spec
from models.decoder import CausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Tensors some exporters write that carry no learned state.
_IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def weight_files(model_dir: Path) -> list[Path]:
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise CheckpointError(f"{index} is not a valid safetensors index: {exc}") from exc
        files = sorted({model_dir / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{index.name} names shard(s) that do not exist: {', '.join(missing)}")
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(model_dir.glob("*.safetensors"))
    if found:
        return found
    raise CheckpointError(f"{model_dir} has no *.safetensors weights")


def _column_major_linears(model: torch.nn.Module) -> None:
    """Store float32 Linear weights column-major ([out, in] viewed over [in, out] storage).

    Same values, same shapes and names; only the memory order changes. MKL's
    float32 GEMV then streams the weight contiguously: measured on these
    machines, 1.3x faster for a single decode row and never slower for wide
    prefill chunks (the tied embedding's row lookup does not mind). Only for
    float32: a column-major bfloat16 weight falls off oneDNN's fast path.
    """
    relaid: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            w = module.weight
            if id(w) not in relaid:  # a tied weight is re-laid once and stays shared
                relaid[id(w)] = torch.nn.Parameter(w.detach().t().contiguous().t(), requires_grad=False)
            module.weight = relaid[id(w)]
    embed = model.model.embed_tokens
    if id(embed.weight) in relaid:  # tied: the embedding keeps sharing the head's tensor
        embed.weight = relaid[id(embed.weight)]


def load_model(model_dir: Path, dtype: str = "bfloat16", spec: ModelSpec | None = None) -> CausalLM:
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    spec = spec or load_spec(model_dir)
    with torch.device("meta"):
        model = CausalLM(spec)
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = spec.tie_word_embeddings
    expected = {k for k in params if not (tied and k == "lm_head.weight")}

    seen: dict[str, torch.Tensor] = {}
    for path in weight_files(model_dir):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key.endswith(_IGNORABLE_SUFFIXES):
                    continue
                if tied and key == "lm_head.weight":
                    continue  # a tied head is the embedding; some exporters write it anyway
                if key not in expected:
                    raise CheckpointError(f"unexpected tensor {key!r} in {path.name}: no such parameter in {spec.architecture}")
                if key in seen:
                    raise CheckpointError(f"tensor {key!r} appears in more than one shard")
                tensor = f.get_tensor(key)
                want = tuple(params[key].shape)
                if tuple(tensor.shape) != want:
                    raise CheckpointError(f"tensor {key!r} has shape {tuple(tensor.shape)}, expected {want}")
                # copy=True: safetensors may hand out views of its file mapping,
                # which are slower to compute on than owned memory.
                seen[key] = tensor.to(torch_dtype, copy=True)
    missing = sorted(expected - seen.keys())
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"missing tensor {missing[0]!r}{more} in {model_dir}")

    model.load_state_dict(seen, strict=False, assign=True)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    if torch_dtype == torch.float32:
        _column_major_linears(model)
    leftover = [n for n, p in model.named_parameters() if p.is_meta]
    if leftover:  # cannot happen if the key checks above are right; fail loudly if they are not
        raise CheckpointError(f"parameters left uninitialised: {leftover}")
    model.eval()
    return model
