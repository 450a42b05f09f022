"""`reasoning_tokens` counts what the output readers call the thought: up to its closer, or up to a
tool call's opener when the model calls without closing it; whole and streamed alike."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from models.family_table import ReasoningFormat
from server.generation import thought_token_count
from server.output import StreamingOutputParser
from server.routes.chat import _ThoughtCounter

THINK = ReasoningFormat("qwen3", "<think>", "</think>", "markers")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call>'


@pytest.fixture(scope="module")
def state(tiny_checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))
    return SimpleNamespace(tokenizer=tokenizer, info=SimpleNamespace(reasoning=THINK))


def _streamed(state, ids: list[int]) -> int:
    """The count the chat stream reaches, fed a token an event as the engine sends them."""
    parser, counter = StreamingOutputParser(THINK, "hermes", True), _ThoughtCounter("hermes", True)
    for i, token in enumerate(ids):
        last = i == len(ids) - 1
        deltas = parser.feed(state.tokenizer.decode([token])) + (parser.finish() if last else [])
        counter.feed(state, SimpleNamespace(token_ids=[token], finish_reason="stop" if last else None), deltas)
    return counter.count


@pytest.mark.parametrize("thought, after", [
    ("I should call it", "\n</think>\n\n" + CALL),  # closed: the closer counts
    ("I should call it", CALL),  # called without closing: the thought ends at the opener
    ("", "\n</think>\n\n" + CALL),  # a thought closed at once (a budget of 0): its closing tokens count
])
def test_the_thought_is_counted_to_its_closer_or_the_call_that_ends_it_whole_and_streamed(state, thought, after):
    encode = lambda text: state.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    ids = encode(thought + after)
    expected = len(encode(thought + ("\n</think>" if "</think>" in after else "")))
    assert 0 < thought_token_count(state, ids, True, "hermes") == expected < len(ids)
    assert _streamed(state, ids) == expected


def test_a_turn_without_a_thought_counts_none_and_a_cut_one_counts_all(state):
    ids = state.tokenizer.encode("still thinking about it", add_special_tokens=False)
    assert thought_token_count(state, ids, False, "hermes") == 0
    assert thought_token_count(state, ids, True, "hermes") == len(ids) == _streamed(state, ids)
