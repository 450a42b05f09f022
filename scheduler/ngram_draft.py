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
rejection rule for it). What can differ is the logits: a step of several
rows rounds differently from a one-row step. In float32 that never changed a
greedy token here (tests/test_ngram_draft.py; the demo model's 48 held-out
agent turns); in bf16 one of those 48 turns broke a near-tie the other way,
as any batched or speculative decoder can.

Longer matches are tried first (`MAX_MATCH` down to `MIN_MATCH` tokens), and
a single token is enough: on those 48 turns with 4 drafts, stopping at a
single-token match gave 1.63 tokens a step against 1.53 stopping at two
(more drafts, fewer of them kept, but a lone sequence's step costs about the
same with four drafts as with none).

Plain Python, no torch: the scheduler asks for drafts while it builds a step.
"""

from __future__ import annotations

MAX_MATCH = 3
MIN_MATCH = 1


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
