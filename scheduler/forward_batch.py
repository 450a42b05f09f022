"""The plain description of one forward step that the scheduler hands the runner.

This is the seam between bookkeeping and tensors: everything here is Python
lists and ints, so the scheduler stays free of torch and its decisions can be
asserted in unit tests; the model runner turns it into index tensors.

A step is a ragged batch of chunks. A chunk feeds `len(token_ids)` tokens of one
sequence starting at position `start` (the number of tokens whose KV is
already in the pool). Decode chunks feed one token; prefill chunks feed a
slice of the prompt. Page tables cover at least `[0, start + len(token_ids))`.

Invariant for the window group: the pages covering positions
`[max(0, start - window + 1), start + len(token_ids))` are live (not None);
pages before that may have been released by a window slide.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SeqChunk:
    seq_id: int
    token_ids: list[int]
    start: int
    full_pages: list[int]  # full-attention group page table (empty if the model has no full layers)
    window_pages: list[int | None]  # window group page table; None = released
    sample: bool  # produce logits for the last fed token

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def is_decode(self) -> bool:
        return len(self.token_ids) == 1 and self.start > 0


@dataclass
class ForwardBatch:
    chunks: list[SeqChunk] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)

    @property
    def sampled(self) -> list[SeqChunk]:
        return [c for c in self.chunks if c.sample]
