"""Load a checkpoint's tokenizer and chat template, offline.

`transformers.AutoTokenizer` already reads every tokenizer format a model
folder can carry (tokenizer.json, sentencepiece, added tokens, the chat
template in tokenizer_config.json or chat_template.jinja), so we use it and
only make sure it can never reach for the network.
"""

from __future__ import annotations

import os
from pathlib import Path

from models.config import CheckpointError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # many exception types for a broken folder
        raise CheckpointError(f"could not load the tokenizer from {model_dir}: {exc}") from exc
