"""Token batches for training the demo model: shared system prefix, masked labels.

What it is for: turning rendered conversations (render.trained_spans) into
token ids with labels only on the characters the model must generate, and
grouping them into deterministic batches whose rows share one prefix -- the
system turn with the tool schemas, identical across most of the corpus.

What it is not for: the model or the optimiser (train.py).

Why it is shaped so: the tools block is ~380 of a conversation's ~540
tokens and carries no loss. Rows of a batch share it, so the training step
runs it once (batch 1) and lets the rest of each row attend to its keys and
values through a cache -- the same attention, a third of the compute. The
split point is a token boundary by construction: the prefix ends with
`<|im_end|>\\n` and the next text starts with `<|im_start|>`.
"""

from __future__ import annotations

import bisect
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import torch

from models.demo.corpus import Conversation
from models.demo.render import TURN_END, trained_spans

IGNORE = -100


@dataclass
class Example:
    prefix: str  # rendered system turn ('' when there is none)
    ids: list[int]  # tokens after the prefix
    labels: list[int]  # ids where trained, IGNORE elsewhere


@dataclass
class Batch:
    prefix_ids: torch.Tensor  # [1, prefix_len] (prefix_len may be 0)
    ids: torch.Tensor  # [rows, len], right-padded
    labels: torch.Tensor  # [rows, len], IGNORE on padding; labels[:, t] is the target at position t


def _system_prefix(text: str) -> str:
    if not text.startswith("<|im_start|>system\n"):
        return ""
    return text[: text.index(TURN_END) + len(TURN_END) + 1]


def rendered(conv: Conversation) -> tuple[str, list[tuple[int, int]]]:
    """The conversation as the serving template renders it, and its trained character spans."""
    return trained_spans(conv.messages, conv.tools, conv.enable_thinking, conv.untrained_reasoning,
                         conv.context_only)


def rendered_all(convs: list[Conversation], workers: int = 2) -> list[tuple[str, list[tuple[int, int]]]]:
    """`rendered` for every conversation, in order, over `workers` processes.

    Why: the template renders each conversation several times (trained_spans checks every turn's
    generation prompt), about 2 ms a conversation: over a third of the run's data preparation on one
    core. With two workers that preparation went from 87 s to 58 s. Forked workers only render
    text; they touch no torch state.
    """
    if workers <= 1 or len(convs) < 64:
        return [rendered(c) for c in convs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(rendered, convs, chunksize=256))


def encode_all(rendered: list[tuple[str, list[tuple[int, int]]]], tokenizer) -> list[Example]:
    """Token ids and labels of rendered conversations (`rendered`), tokenized in one batch (the
    tokenizer's threads share it).

    Only the text after each conversation's system turn is tokenized: the turn is ~460 of a
    conversation's ~700 tokens and the same text across the corpus, so it is tokenized once
    (`_prefix_ids`, when batches are built). The ids are the whole text's: the turn ends with a
    special token and a newline, and the next text starts with one, so no token spans the split
    (tests/test_demo_corpus.py checks that the two agree). Measured: 5.8 s of tokenizing for the
    12,656 conversations became about 2.
    """
    prefixes = [_system_prefix(text) for text, _ in rendered]
    enc = tokenizer([text[len(prefix):] for (text, _), prefix in zip(rendered, prefixes)],
                    add_special_tokens=False, return_offsets_mapping=True)
    return [_labelled(text, prefix, spans, ids, offsets)
            for (text, spans), prefix, ids, offsets in zip(rendered, prefixes, enc["input_ids"], enc["offset_mapping"])]


def _labelled(text: str, prefix: str, spans: list[tuple[int, int]], ids: list[int], offsets: list[tuple[int, int]]
              ) -> Example:
    """`ids` and `offsets` are the tokens of `text` after `prefix`; `spans` are characters of `text`."""
    shift = len(prefix)
    labels = [IGNORE] * len(ids)
    starts, ends = [a for a, _ in offsets], [b for _, b in offsets]  # both non-decreasing
    for start, end in spans:
        if start < shift:
            raise ValueError("the system turn must be an untrained prefix of the conversation")
        start, end = start - shift, end - shift
        # The tokens that overlap [start, end): ending after start and starting before end.
        for i in range(bisect.bisect_right(ends, start), bisect.bisect_left(starts, end)):
            a, b = offsets[i]
            if a < start or b > end:
                raise ValueError(f"token {i} straddles a trained span boundary in: "
                                 f"{text[shift + a - 20:shift + b + 20]!r}")
            labels[i] = ids[i]
    return Example(prefix, ids, labels)


@lru_cache(maxsize=64)
def _prefix_ids(tokenizer, prefix: str) -> list[int]:
    return tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []


def batches(examples: list[Example], tokenizer, rows: int, seed: int) -> list[Batch]:
    """Deterministic batches of up to `rows` examples sharing one prefix, similar lengths together."""
    rng = random.Random(seed)
    groups: dict[str, list[Example]] = {}
    for ex in examples:
        groups.setdefault(ex.prefix, []).append(ex)
    out: list[Batch] = []
    pad = tokenizer.pad_token_id
    for prefix in sorted(groups):
        group = groups[prefix]
        rng.shuffle(group)
        prefix_ids = _prefix_ids(tokenizer, prefix)
        # Sort within chunks of 16 batches: little padding, order still mixed across the run.
        chunk = rows * 16
        for c in range(0, len(group), chunk):
            part = sorted(group[c: c + chunk], key=lambda e: len(e.ids))
            for b in range(0, len(part), rows):
                out.append(_collate(part[b: b + rows], prefix_ids, pad))
    rng.shuffle(out)
    return out


def _collate(examples: list[Example], prefix_ids: list[int], pad: int) -> Batch:
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for r, e in enumerate(examples):
        ids[r, : len(e.ids)] = torch.tensor(e.ids)
        # Shift: position t is trained to predict token t+1.
        labels[r, : len(e.ids) - 1] = torch.tensor(e.labels[1:])
    # The first token after the prefix opens a user turn; _labelled() checked it is never a target,
    # so no loss needs the prefix's last position.
    return Batch(torch.tensor([prefix_ids], dtype=torch.long).reshape(1, -1), ids, labels)
