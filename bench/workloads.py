"""The requests each workload sends, from fixed seeds, and their sizes per mode.

Prompts are text made of whole-word vocabulary pieces of the benchmark
tokenizer (each word one token under its Qwen2 split rule), cut to an exact
token count, so every peer -- each tokenizing the text itself -- sees the
same prompt length; the servers' `usage.prompt_tokens` confirms it in the
report. Repeat r of a workload uses seed + r: repeats differ, so no repeat
is served from a prefix cache warmed by the one before, and every peer gets
the same repeat r.

Not for: sending (bench.loadgen) or shaping per peer (bench.peers).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class Req:
    prompt: str
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class LoadSpec:
    name: str
    title: str
    streams: int
    prompt_range: tuple[int, int]
    output_range: tuple[int, int]
    seed: int


@dataclass(frozen=True)
class Sizes:
    repeats: int
    single: LoadSpec
    c8: LoadSpec
    c32: LoadSpec
    long: LoadSpec  # an agent's regime: a few streams, each over a long prompt (tools, history)
    slot_prefix: int


# Sized so that a whole `make bench` (five peers, three rounds, slots, agent
# trace) ends in about an hour and a quarter on a 2-core machine: the slowest
# peers (static batching in generate, transformers serve) spend minutes per
# round on these already, and the earlier sizes (c8 outputs up to 64, c32 up
# to 32) ran for many hours. Mixed lengths are kept: prompts vary 8x, outputs 3x.
FULL = Sizes(
    repeats=3,
    single=LoadSpec("single", "single stream", 1, (32, 32), (32, 32), 1000),
    c8=LoadSpec("c8", "8 concurrent streams", 8, (16, 128), (8, 24), 2000),
    c32=LoadSpec("c32", "32 concurrent streams", 32, (16, 64), (4, 12), 3000),
    long=LoadSpec("long", "8 concurrent streams over long prompts", 8, (768, 1024), (16, 32), 4000),
    slot_prefix=4096,
)
SHORT = Sizes(
    repeats=1,
    single=LoadSpec("single", "single stream", 1, (16, 16), (8, 8), 1000),
    c8=LoadSpec("c8", "8 concurrent streams", 8, (8, 64), (2, 6), 2000),
    c32=LoadSpec("c32", "32 concurrent streams", 32, (8, 32), (2, 4), 3000),
    long=LoadSpec("long", "8 concurrent streams over long prompts", 8, (192, 256), (2, 4), 4000),
    slot_prefix=1024,
)


@lru_cache(maxsize=4)
def tokenizer(model_dir: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


@lru_cache(maxsize=4)
def _words(model_dir: Path) -> tuple[str, ...]:
    """Vocabulary pieces that are a space and letters, and encode back to themselves alone."""
    tok = tokenizer(model_dir)
    out = []
    for piece, idx in tok.get_vocab().items():
        text = tok.decode([idx])
        if re.fullmatch(r" [A-Za-z]{2,}", text) and tok.encode(text).ids == [idx]:
            out.append(text)
    if len(out) < 20:
        raise ValueError(f"{model_dir}: too few whole-word tokens ({len(out)}) to build prompts")
    return tuple(sorted(out))


def make_prompt(model_dir: Path, n_tokens: int, rng: random.Random) -> tuple[str, int]:
    words = _words(model_dir)
    text = "".join(rng.choice(words) for _ in range(n_tokens))
    ids = tokenizer(model_dir).encode(text).ids
    return text, len(ids)


def load_requests(model_dir: Path, spec: LoadSpec, repeat: int) -> list[Req]:
    rng = random.Random(spec.seed + repeat)
    reqs = []
    for _ in range(spec.streams):
        text, n = make_prompt(model_dir, rng.randint(*spec.prompt_range), rng)
        reqs.append(Req(text, n, rng.randint(*spec.output_range)))
    return reqs
