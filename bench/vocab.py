"""A benchmark checkpoint whose tokenizer covers every row of the embedding.

`bench.checkpoints` pairs Qwen3-0.6B-shaped weights (vocab 151936) with the
tiny Qwen tokenizer (a few hundred tokens). A random model samples ids far
beyond the tokenizer, and servers stream those as nothing: transformers'
streamer drops a token that decodes to no text, llama.cpp gets `[PAD]`
pieces. A load generator that times the first chunk of *content* then sees
no content at all. So this module makes a sibling folder of the checkpoint
with the same weights (symlinked, not copied) and a tokenizer padded with
plain added tokens `<|bN|>` up to `vocab_size`, so every id has visible text,
as a real 151k-token vocabulary does. The padding goes into the BPE model's
vocabulary, not the added tokens (150k added tokens make transformers take
half a minute to load a tokenizer); with no merge producing them, encoding
text never yields them, so prompts tokenize exactly as with the tiny
tokenizer, and decoding an id gives its `<|bN|>` text (printable ASCII maps
to itself in the byte-level alphabet).

Not for: building the weights (bench.checkpoints does that).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PAD_FORMAT = "<|b{}|>"


def full_vocab(model_dir: Path) -> Path:
    """The folder `<model_dir>-fullvocab`, built once; same weights, padded tokenizer."""
    out = model_dir.with_name(model_dir.name + "-fullvocab")
    if (out / "tokenizer.json").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.name == "tokenizer.json":
            continue
        if f.suffix == ".safetensors":
            (tmp / f.name).symlink_to(f.resolve())
        else:
            shutil.copy(f, tmp / f.name)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    used = set(spec["model"]["vocab"].values()) | {t["id"] for t in spec.get("added_tokens", [])}
    have = max(used) + 1
    if have > vocab:
        raise ValueError(f"{model_dir}: tokenizer has ids up to {have - 1}, beyond vocab_size {vocab}")
    # The loader re-numbers an added token absent from the model vocabulary to
    # (model vocabulary size + k), which would land the special tokens on
    # padding ids; listing them in the model vocabulary at their own ids keeps
    # them where the checkpoint's chat template and EOS expect them.
    spec["model"]["vocab"].update({t["content"]: t["id"] for t in spec.get("added_tokens", [])})
    spec["model"]["vocab"].update({PAD_FORMAT.format(i): i for i in range(have, vocab)})
    if sorted(spec["model"]["vocab"].values()) != list(range(vocab)):
        raise ValueError(f"{model_dir}: padded vocabulary is not the contiguous ids 0..{vocab - 1}")
    (tmp / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    tmp.rename(out)
    return out
