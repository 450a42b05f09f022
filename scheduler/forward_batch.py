"""The plain description of one forward step that the scheduler hands the runner.

This is the seam between bookkeeping and tensors: everything here is Python
lists and ints, so the scheduler stays free of torch and its decisions can be
asserted in unit tests; the model runner turns it into index tensors.

A step is a ragged batch of chunks. A chunk feeds `len(token_ids)` tokens of one
sequence starting at position `start` (the number of tokens whose KV is
already in the pool). Decode chunks feed one token; prefill chunks feed a
slice of the prompt. Page tables cover at least `[0, start + len(token_ids))`.

Logits rows: the runner returns, chunk by chunk in order, one row for each
scored position (`score_from <= p < score_to`: a prompt position whose logits
score the next prompt token, for prompt logprobs), then the sampled rows if the
chunk samples: the last fed token's, or with `drafts` guessed tokens fed after
it (scheduler/ngram_draft.py) one row for it and each draft. Scored positions
never include a sampled one: they stop before the prompt's last token, whose
logits choose the first output token.

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
    # Positions [score_from, score_to) (absolute, inside this chunk) also produce logits: they score
    # the prompt token that follows each (prompt logprobs). Empty unless the request asked for them.
    score_from: int = 0
    score_to: int = 0
    # The last `drafts` token ids are guesses fed after the sequence's last token (a decode only); each
    # gets a sampled row, and their KV counts only as far as the samples agree with them.
    drafts: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def num_scored(self) -> int:
        return max(0, self.score_to - self.score_from)

    @property
    def num_sampled(self) -> int:
        return 1 + self.drafts if self.sample else 0

    @property
    def draft_ids(self) -> list[int]:
        """The guessed ids this chunk feeds after the sequence's last token (none if not a drafted decode)."""
        return self.token_ids[len(self.token_ids) - self.drafts:]

    @property
    def is_decode(self) -> bool:
        """One token fed after the sequence's computed KV: attention takes the single-query path."""
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

    def logit_rows(self) -> list[int]:
        """Row indices into the flattened tokens whose logits the step returns, in the order above."""
        rows, base = [], 0
        for c in self.chunks:
            rows.extend(base + p - c.start for p in range(c.score_from, c.score_to))
            base += len(c.token_ids)
            rows.extend(range(base - c.num_sampled, base))
        return rows

    def split_logits(self, logits) -> tuple[list, list]:
        """The step's logits (any sliceable [rows, vocab]) as (scored blocks, one [k, vocab] per chunk with
        scored positions, in chunk order; sampled rows, one [1 + drafts, vocab] per sampling chunk, in chunk
        order)."""
        scored, sampled, r = [], [], 0
        for c in self.chunks:
            if c.num_scored:
                scored.append(logits[r:r + c.num_scored])
                r += c.num_scored
            if c.sample:
                sampled.append(logits[r:r + c.num_sampled])
                r += c.num_sampled
        return scored, sampled
