"""One sequence in the engine: tokens, progress, page tables, anchor, outcome.

A request with `n` choices becomes `n` sequences sharing a `request_id`; the
first is the leader and the others wait until the leader's prompt is in the
prefix cache, then share its pages through it.

Progress is one number, `num_computed`: the tokens whose KV is in the pool.
Every step feeds `all_ids[num_computed:...]`; the chunk that reaches the last
token also samples. So a fresh prompt, a chunked prefill, a decode step and a
recompute after preemption are the same operation with different lengths.

Plain Python: no torch.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from scheduler.sampling_params import SamplingParams
from scheduler.window import AnchorState


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    seq_id: int
    request_id: str
    index: int  # choice index within its request
    prompt_ids: list[int]
    params: SamplingParams
    leader: "Sequence | None" = None  # n > 1: wait for this one's prompt to be cached
    slot_id: int | None = None  # the logical slot (--parallel) serving this request
    output_ids: list[int] = field(default_factory=list)
    status: SeqStatus = SeqStatus.WAITING
    num_computed: int = 0
    full_pages: list[int] = field(default_factory=list)
    window_pages: list[int | None] = field(default_factory=list)
    released: int = 0  # window-group positions below this hold no page of ours
    locked_prefix: int = 0  # the cached prompt's aligned end: the window before it is never slid by us
    num_cached_prompt: int = -1  # prompt tokens served from the cache at first admission
    decode_steps: int = 0
    anchor: AnchorState = field(default_factory=AnchorState)
    # Window positions below this a plain slide would have released; those from `released` on are live
    # only because the anchor capped the slide (0: none). Marked in the cache when the turn finishes.
    anchor_kept_to: int = 0
    finish_reason: str | None = None
    arrival: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    prompt_cached: bool = False  # the prompt's pages went into the prefix cache
    # Prompt logprobs: positions [0, prompt_scored) have scored the token after them. Only the leader
    # scores (its siblings share the same prompt), and it never adopts cached KV past this point:
    # a position served from the cache produces no logits.
    prompt_scored: int = 0

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def scores_prompt(self) -> bool:
        return self.params.prompt_logprobs is not None and self.leader is None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def remaining(self) -> int:
        """Tokens still to feed before the next sample."""
        return self.num_tokens - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.status is SeqStatus.RUNNING and self.remaining == 1 and self.num_computed > 0

    @property
    def finished(self) -> bool:
        return self.status is SeqStatus.FINISHED
