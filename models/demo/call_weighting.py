"""Heavier loss on the tool calls' tokens: the `--call-weight` training option.

What it is for: the held-out calls are what the demo is measured on, and a
20-minute run misses them mostly by writing them inexactly (probe_split.py:
on its own training distribution the shipped checkpoint drops a two-word
city's second word, rounds a copied number), not by choosing the wrong tool.
Yet a call block is a small share of the trained tokens -- thoughts and
answers are most of them -- so the plain mean loss spends most of each step
on text no evaluation reads exactly. This weights every target token from
`<tool_call>` through `</tool_call>` by `weight`, the rest by 1.

Why it is shaped so: the weights come from the labels alone (the targets,
which input noise leaves untouched), so every data-parallel rank weights its
rows alike and a seed still gives the same weights. The loss stays a sum over
tokens divided by the count of trained tokens (train._loss), so a weight of 1
is the plain mean, bit for bit.

Measured (models/demo/README.md, run CW3): at a weight of 3 the held-out calls went 120, 118 and 109 at
seeds 0-2 against 111, 112 and 114 without it -- inside one recipe's seed spread -- and the calls on the
training distribution 116 against 114; so it is off (1) by default.

Not for: the copy drill, whose loss decides when it ends.
"""

from __future__ import annotations

import torch


def call_token_weights(labels: torch.Tensor, open_id: int, close_id: int, weight: float) -> torch.Tensor:
    """Per-target weights, [rows, len] like `labels`: `weight` inside call blocks (opener and closer
    included), 1 elsewhere. Invariant: an opener without its closer in the row weights to the row's end."""
    opened = torch.cumsum(labels == open_id, dim=1)  # [rows, len]
    closed_before = torch.cumsum(labels == close_id, dim=1) - (labels == close_id).long()  # [rows, len]
    inside = opened > closed_before
    return torch.where(inside, torch.tensor(weight, dtype=torch.float32), torch.tensor(1.0))
