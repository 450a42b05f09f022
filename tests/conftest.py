"""Shared pytest fixtures.

`tiny_checkpoint` is a session-scoped factory, `tiny_checkpoint(family,
**kwargs) -> Path`, over `models.tiny_checkpoint.build_tiny_checkpoint`. Builds
are cached on disk under tests/.checkpoints/<family>-<key>, the key hashing
every argument, BUILDER_VERSION, the builder's own source files and the
transformers / tokenizers / torch versions, so a changed builder or library
never serves a stale folder even when nobody bumps the version. A build is
written into a hidden staging folder next to the cache and renamed into place:
a crashed or concurrent build never leaves a half folder under a real key.

Treat a returned folder as read-only: it is shared by every test and run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent
_CACHE = Path(__file__).resolve().parent / ".checkpoints"
_BUILDER_SOURCES = ("models/tiny_checkpoint.py", "models/tiny_tokenizer.py", "models/chat_templates")


def _builder_fingerprint() -> str:
    import tokenizers
    import torch
    import transformers

    from models.tiny_checkpoint import BUILDER_VERSION

    digest = hashlib.sha256()
    digest.update(f"{BUILDER_VERSION}|{transformers.__version__}|{tokenizers.__version__}|{torch.__version__}".encode())
    for source in _BUILDER_SOURCES:
        path = _ROOT / source
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.relative_to(_ROOT).as_posix().encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def tiny_checkpoint():
    """Factory: `tiny_checkpoint("qwen3", sliding_window=8)` -> Path of a cached tiny checkpoint."""
    from models.tiny_checkpoint import build_tiny_checkpoint

    fingerprint = _builder_fingerprint()

    def build(family: str, **kwargs) -> Path:
        arguments = json.dumps({"family": family, "kwargs": kwargs, "builder": fingerprint}, sort_keys=True)
        target = _CACHE / f"{family}-{hashlib.sha256(arguments.encode()).hexdigest()[:16]}"
        if target.is_dir():
            return target
        _CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{target.name}-", dir=_CACHE))
        try:
            build_tiny_checkpoint(family, staging, **kwargs)
            try:
                os.rename(staging, target)
            except OSError:
                if not target.is_dir():  # not a lost race with an identical build: a real failure
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    return build
