"""Responses `truncation: "auto"`: which of a turn's items are kept when its input overflows the context.

What it is for: OpenAI's Responses API, asked for `truncation: "auto"`, answers a conversation longer
than the model's context by dropping items from its beginning instead of refusing it with a 400 (the
default, "disabled"). Agents that chain turns with `previous_response_id` for hours rely on it.

Why it is shaped so: an item alone is not a safe place to cut. A `function_call_output` kept without
its `function_call`, or a `reasoning` item without the message it led to, renders a prompt no chat
template expects (some refuse a tool result with no call before it). So the kept conversation starts
at a user message: whole turns go, oldest first. System and developer messages are the conversation's
standing instructions, not its history, and are kept wherever they stood. `cut_points` lists where the
kept part may start; the route tries them from the fewest items dropped to the most (by bisection, as
the prompt only gets shorter) and takes the first that fits. This module only chooses items: it
renders nothing and knows no tokenizer.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # responses.py renders with `kept`, so this module reads items by their fields alone
    from server.protocol.responses import InputItem

_STANDING = ("system", "developer")


def _message_of(item: InputItem, roles: tuple[str, ...]) -> bool:
    return item.type == "message" and item.role in roles


def cut_points(items: Sequence[InputItem]) -> list[int]:
    """Indices at which the kept conversation may start, fewest items dropped first: every user message
    but the first item (starting there would drop nothing)."""
    return [i for i, item in enumerate(items) if i > 0 and _message_of(item, ("user",))]


def kept(items: Sequence[InputItem], start: int) -> list[InputItem]:
    """`items` from `start` on, after the system and developer messages that stood before it."""
    standing = [item for item in items[:start] if _message_of(item, _STANDING)]
    return [*standing, *items[start:]]


def first_fitting(points: Sequence[int], fits: Callable[[int], bool]) -> int | None:
    """The first of `points` (ordered so that each drops more than the one before) where `fits(point)`
    holds, assuming that once one fits every later one does; None when none does. Tries about
    log2(len(points)) of them."""
    i = bisect.bisect_left(points, True, key=fits)  # fits is False, then True, along points
    return points[i] if i < len(points) else None
