"""Window slides and anchors: keeping the state an agent is about to come back to.

The workload: an agentic turn is not one generation. The model reasons,
calls a tool, the harness runs it, and the *same conversation* comes
back with the result spliced in -- but edited at that boundary (thinking
dropped, the call rewritten, a result appended). So the next prompt
agrees with this one up to **the tool call** and diverges after it. The
position where the first tool call opened is where the next turn rejoins.

A windowed layer slides its window forward as it decodes; by the time
the turn ends the state around that position is long gone and the next
turn recomputes a prefix that was live a few dozen tokens earlier. An
*anchor* is one integer saying "keep this position", and the slide here
spends it: it stops short of `anchor - window - SWA_RETAIN_GAP` instead
of following the cursor.

Why the anchor is dropped rather than held forever: holding it costs
pool. Far past the anchor, a request would hold two windows with an
unbounded gap between them, and the pool floor
(`pool_budget.swa_tokens_per_request`) would have to be unbounded too.
Once the cursor drifts more than a window plus the gap past what the
anchor wants held, the turn is clearly not about to end and the prefix is
cheaper to recompute than to hold -- `decode_slide` says drop it.

Not for: touching pages. Every function here returns a plain decision
(which positions to release, whether to forget the anchor); the engine
applies it to the pool. No torch.

Ported from seed 000 (ferrox's anchor module, itself from FreeToken's
`scheduler/cache.py` and `scheduler/scheduler.py`), same names and numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from scheduler.pool_budget import DEFAULT_SWA_EVICTION_INTERVAL, SWA_RETAIN_GAP, align_down

__all__ = [
    "DEFAULT_SWA_EVICTION_INTERVAL",
    "SWA_RETAIN_GAP",
    "AnchorState",
    "SlideDecision",
    "SlidingRequest",
    "WindowPolicy",
    "decode_slide",
    "prefill_slide",
    "resolve_anchor_token",
]


def resolve_anchor_token(
    opener: str | None, encode: Callable[[str], Sequence[int]]
) -> int | None:
    """The single token that announces a tool call, or None.

    Only an opener that encodes to **exactly one** token counts. That is
    what makes detection free: the sampled id alone says "tool call", an
    integer compare on every step. A multi-token opener would need the
    decoded text and a partial-match buffer on the hot path; a checkpoint
    without a one-token opener simply gets no anchors, and caching falls
    back to ordinary prefix reuse.

    `encode` is the served tokenizer without special-token handling: the
    opener is looked up as literal text.
    """
    if not opener:
        return None
    ids = list(encode(opener))
    return ids[0] if len(ids) == 1 else None


class AnchorState:
    """One request's anchor: the sequence length at its first tool-call opener."""

    __slots__ = ("_anchor_len", "_spent")

    def __init__(self) -> None:
        self._anchor_len: int | None = None
        self._spent = False  # this turn's first call was seen: a later one never becomes the anchor

    @property
    def anchor_len(self) -> int | None:
        return self._anchor_len

    def clear(self) -> None:
        """Drop the anchor (the slide's drop rule). The turn stays spent: its next turn still rejoins at or
        before the first call, so a later call held instead would cost pool and serve nothing."""
        self._anchor_len = None

    def observe(
        self, token: int, anchor_token: int | None, position: int, finished: bool
    ) -> bool:
        """Offer one sampled token; True when it became the anchor.

        The **first** tool call of a turn is the anchor and later ones are
        ignored: everything from the first call on is what the harness
        rewrites. A token that ends the generation is not an anchor
        either -- there is no continuation to rejoin. `position` is the
        sequence length *including* this token.
        """
        if finished or self._spent or anchor_token is None:
            return False
        if token != anchor_token:
            return False
        self._anchor_len = position
        self._spent = True
        return True

    def __repr__(self) -> str:
        return f"AnchorState(anchor_len={self._anchor_len})"


@dataclass(frozen=True)
class WindowPolicy:
    """The geometry a slide reads."""

    sliding_window: int
    page_size: int
    # Decode steps between slides; the pool floor pays for what piles up
    # in between. Clamped to >= 1: zero would slide every step *and*
    # divide by zero in the cadence check.
    eviction_interval: int = DEFAULT_SWA_EVICTION_INTERVAL

    def __post_init__(self) -> None:
        if self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1, got {self.sliding_window}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        object.__setattr__(self, "eviction_interval", max(1, self.eviction_interval))


@dataclass(frozen=True)
class SlidingRequest:
    """One request's position, as a slide sees it."""

    # The sequence length the request has reached (decode) or computed
    # (prefill).
    position: int
    # How far its window state has already been released.
    already_released: int = 0
    # The prefix the prefix cache owns. Never released by one request:
    # those pages are shared, and freeing them would pull them out from
    # under every other request holding the same prefix.
    locked_prefix: int = 0
    # Decode steps taken. Step 0 is skipped: its state may still be in
    # flight from the prefill that produced it.
    decode_step: int = 1


@dataclass(frozen=True)
class SlideDecision:
    """Release window state for positions `[free_from, free_to)`; maybe drop the anchor."""

    free_from: int = 0
    free_to: int = 0
    # The cursor drifted too far past the anchor to keep holding it; the
    # caller should clear its AnchorState.
    drop_anchor: bool = False
    # Where a plain slide would have released up to: window state in
    # [free_to, anchor_kept_to) is live only because the anchor capped the
    # slide (0 when it did not). What `anchor_reused_tokens` is measured by.
    anchor_kept_to: int = 0

    @property
    def frees_nothing(self) -> bool:
        return self.free_to <= self.free_from

    @property
    def released(self) -> int:
        return max(0, self.free_to - self.free_from)


def decode_slide(
    request: SlidingRequest,
    anchor: int | None,
    policy: WindowPolicy,
    forward_iter: int,
) -> SlideDecision | None:
    """The window slide during decode; None means "not this step".

    Not this step: the cadence has not come round, or the request is on
    its first decode step -- both cheap checks the caller would otherwise
    have to remember.

    An anchor only ever makes the slide *less* aggressive (`min` with its
    cap, never `max`): it cannot free state a plain slide would keep.
    """
    if forward_iter % policy.eviction_interval != 0:
        return None
    if request.decode_step < 1:
        return None
    window = policy.sliding_window
    page = policy.page_size
    # Legitimately negative for a request that has not yet produced a
    # window's worth of tokens. Clamping it to zero before the anchor
    # comparison would make the drop rule fire on requests that have
    # barely started.
    threshold = (request.position - 1) - window - page
    drop_anchor = False
    plain = threshold
    if anchor is not None:
        cap = anchor - window - SWA_RETAIN_GAP
        if threshold - cap > window + SWA_RETAIN_GAP:
            # More than a window past what the anchor wants held: holding
            # both would need unbounded pool.
            drop_anchor = True
        else:
            threshold = min(threshold, cap)
    decision = _release_span(threshold, request, page, drop_anchor)
    kept_to = align_down(plain, page)
    if threshold < plain and kept_to > decision.free_to:
        decision = replace(decision, anchor_kept_to=kept_to)
    return decision


def prefill_slide(request: SlidingRequest, policy: WindowPolicy) -> SlideDecision:
    """The prefill sibling of `decode_slide`, run on **every** prefill batch.

    No cadence: one chunked prefill step can add thousands of tokens, and
    waiting for a step count would let a long prompt hold its whole
    history's window state. The threshold is measured from what has been
    computed, and the anchor plays no part -- a prompt being prefilled
    has not called a tool yet.
    """
    threshold = request.position - policy.sliding_window - policy.page_size
    return _release_span(threshold, request, policy.page_size, False)


def _release_span(
    threshold: int, request: SlidingRequest, page: int, drop_anchor: bool
) -> SlideDecision:
    # A negative threshold aligns further negative, so it never exceeds
    # `start` and nothing is released.
    aligned = align_down(threshold, page)
    start = max(request.already_released, request.locked_prefix)
    return SlideDecision(free_from=start, free_to=max(aligned, start), drop_anchor=drop_anchor)
