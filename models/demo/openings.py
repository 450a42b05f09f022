"""Openings: the start of a request's first thought, trained on its own (the `--opening-every` option).

What it is for: 31 of the shipped checkpoint's 33 held-out call misses (offline) are made in the first
two sentences of its first thought, where it names the request's kind and copies its values ("The user
wants the weather in me.", "The user wants 254.8 - 25."); given a right thought, the call that follows is
right (teacher-forced held-out calls: all of them). In a whole conversation that decision is some 25 of ~240
tokens after the shared system turn. An opening row is the conversation cut after those sentences --
the request, the generation prompt and the thought's first two sentences, trained on those sentences
only -- so a batch of openings trains several times the decisions an agent batch of the same cost does.

What it is not for: anything served. The rows are training text only.

Why it is shaped so: a cut falls right after the whitespace that ends a sentence (or after the newline
that ends a shorter thought), where no token spans it -- the tokenizer never glues a space or newline to
the word after it -- so an opening's ids are the whole conversation's first ids; `openings` checks that
and drops any row where it does not hold. Only a first turn that thinks is cut: a turn without a thought
(no thinking, or its reasoning dropped as a client would) has no opening to train.
"""

from __future__ import annotations

import re

from models.demo.dataset import IGNORE, Example, encode_all
from models.demo.render import THINK_CLOSE

GENERATION_PROMPT = "<|im_start|>assistant\n<think>\n"
TOOL_RESULT = "<tool_response>"
THOUGHT_END = "\n" + THINK_CLOSE
SENTENCES = 2
_SENTENCE_END = re.compile(r"[.?!][ \n]")


def opening(text: str, spans: list[tuple[int, int]], sentences: int = SENTENCES
            ) -> tuple[str, list[tuple[int, int]]] | None:
    """The conversation `text` cut after the first `sentences` sentences of the first trained turn's
    thought, with that stretch as its one trained span; None when that turn is not a thinking first
    turn (it follows a tool result, or it opens without a thought)."""
    if not spans:
        return None
    start, end = spans[0]
    before = text[:start]
    turn = before.rfind("<|im_start|>user\n")
    if turn < 0 or not before.endswith(GENERATION_PROMPT) or TOOL_RESULT in before[turn:]:
        return None
    thought_end = text.find(THOUGHT_END, start, end)
    if thought_end <= start:
        return None
    cut = thought_end + 1  # after the newline that ends the thought
    for n, match in enumerate(_SENTENCE_END.finditer(text, start, thought_end + 1), 1):
        if n == sentences:
            cut = min(cut, match.end())
            break
    return text[:cut], [(start, cut)]


def openings(rendered: list[tuple[str, list[tuple[int, int]]]], examples: list[Example], tokenizer
             ) -> list[Example]:
    """The openings of `rendered` conversations whose `examples` (their encoded whole texts, in the
    same order) begin with the opening's ids; conversations without an opening give none."""
    cut = [(i, o) for i, o in ((i, opening(text, spans)) for i, (text, spans) in enumerate(rendered)) if o]
    encoded = encode_all([o for _, o in cut], tokenizer)
    kept = []
    for (i, _), ex in zip(cut, encoded):
        whole = examples[i]
        if ex.prefix == whole.prefix and whole.ids[: len(ex.ids)] == ex.ids and any(l != IGNORE for l in ex.labels):
            kept.append(ex)
    return kept
