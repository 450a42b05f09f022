"""Noise on the tokens the model will later read back from its own output (exposure bias).

What it is for: in training, every assistant token the model reads is the corpus's own, correct one;
in generation it reads what it wrote itself, and one wrong token (a city copied one piece too far, a
stray word in a thought) puts it somewhere training never went. The held-out misses of the shipped
checkpoint include such runs: "Seoul at once in Seoul at once in ...", "per per per ...". `noised`
replaces a small share of those read-back tokens with random ordinary tokens, leaving every label as
it was, so the model is trained to go on correctly after a wrong token of its own.

Why only read-back tokens: the user's and the tools' tokens are given, not generated, so their being
wrong is not what generation meets. Why only ordinary tokens, both replaced and replacing: markers
(`<tool_call>`, `</think>`) are structure the model emits at sharp points; they stay as they are.
"""

from __future__ import annotations

import torch

from models.demo.dataset import IGNORE, Batch


def noised(batch: Batch, share: float, plain: torch.Tensor, generator: torch.Generator) -> Batch:
    """`batch` with about `share` of its read-back ordinary tokens replaced by random ones from `plain`
    (the ordinary token ids, [n]); labels, and so the loss's targets, unchanged."""
    # Position t is trained to predict ids[t + 1] (dataset._collate), so ids[:, t + 1] is read back.
    read_back = torch.zeros_like(batch.ids, dtype=torch.bool)  # [rows, len]
    read_back[:, 1:] = batch.labels[:, :-1] != IGNORE
    ordinary = torch.isin(batch.ids, plain)
    hit = read_back & ordinary & (torch.rand(batch.ids.shape, generator=generator) < share)
    ids = batch.ids.clone()
    ids[hit] = plain[torch.randint(len(plain), (int(hit.sum()),), generator=generator)]
    return Batch(batch.prefix_ids, ids, batch.labels)
