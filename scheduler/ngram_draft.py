"""Draft tokens by prompt lookup: guess what comes next from what followed the same words earlier.

What it is for: one decoding sequence streams every weight of the model from
memory for each token, so a step that feeds a few more positions costs little
more than one that feeds one (measured on the Qwen3-0.6B shape, bf16, two
threads: a pass over the layer weights 35 ms for one row, 39 ms for eight).
Agents repeat themselves a lot -- a call's arguments copy the request, an
answer quotes the tool result, code and JSON echo names defined above -- so
the tokens after the latest earlier occurrence of the sequence's last few
tokens are often the ones it writes next. The engine feeds them as drafts
after the real token and keeps those the model itself samples (vLLM's `ngram`
speculative method, llama.cpp's lookup decoding).

Why it is shaped so: a draft is a guess and never an output. The engine
samples each position from the model's own logits, in order, as a plain
decode would, and stops at the first sample that differs from the draft: so
the output is what a plain decode of the same logits gives, greedy or sampled
(a draft is a fixed proposal, and sampling then comparing is the exact
rejection rule for it). The logits are the same bit for bit in float32
(tests/test_ngram_draft.py); in bf16 a step of several rows rounds
differently from a one-row step, so where two tokens nearly tie the choice
can differ, as in any batched or speculative decoder. Longer matches are tried first
(`MAX_MATCH` down to `MIN_MATCH` tokens): a one-token match is mostly noise.

Plain Python, no torch: the scheduler asks for drafts while it builds a step.
"""

from __future__ import annotations

MAX_MATCH = 3
MIN_MATCH = 2


def propose(ids: list[int], k: int, max_match: int = MAX_MATCH, min_match: int = MIN_MATCH) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of `ids`' last n tokens, for the largest
    n in [min_match, max_match] that occurs earlier; [] when none does (or k < 1)."""
    if k < 1:
        return []
    for n in range(max_match, min_match - 1, -1):
        if len(ids) <= n:
            continue
        tail, last = ids[-n:], ids[-1]
        # p is where an earlier match would end; scan back from the latest, the one nearest in the text.
        for p in range(len(ids) - 2, n - 2, -1):
            if ids[p] == last and ids[p - n + 1:p + 1] == tail:
                return ids[p + 1:p + 1 + k]
    return []
