"""Replacing a model's Linear modules in place, for the load-time weight treatments.

What it is for: models/split_precision.py (half copies for few-row calls) and
models/prepacked_linear.py (oneDNN's blocked layout) each swap chosen
`nn.Linear` modules for a module of their own after the checkpoint is loaded;
finding each one's parent and attribute is the same walk for both.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def swap_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module],
                 chosen: Callable[[nn.Linear], bool] = lambda linear: True) -> int:
    """Replace every `chosen` Linear of `model` by `make(linear)`; returns how many were replaced."""
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and chosen(m)]
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(linear))
    return len(targets)
