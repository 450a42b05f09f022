"""Reasoning separation: markers stripped, whitespace conventions, whole == streamed."""

from __future__ import annotations

import pytest

from models.family_table import ReasoningFormat
from server.output import ContentDelta, ReasoningDelta, ReasoningMarkers, ReasoningStream, resolve_markers, split_reasoning
from server.output.reasoning import THINK

GEMMA4 = ReasoningMarkers("<|channel>thought", "<channel|>")
TOOL = ("<tool_call>",)

# (case, text, prompt_opened, tool openers, markers, expected reasoning, expected content)
CASES = [
    ("qwen3 thought then answer", "<think>\nLet me see.\n</think>\n\nIt is 4.", False, (), THINK, "Let me see.", "It is 4."),
    ("empty thought (thinking off)", "<think>\n\n</think>\n\nHi", False, (), THINK, "", "Hi"),
    ("leading whitespace before the opener", "\n  <think>a</think>b", False, (), THINK, "a", "b"),
    ("prompt opened the block", "pondering\n</think>\n\nAnswer", True, (), THINK, "pondering", "Answer"),
    ("no opener, not opened: all content", "Just an answer </think> here", False, (), THINK, "", "Just an answer </think> here"),
    ("an opener later in the answer is content", "Use <think> tags", False, (), THINK, "", "Use <think> tags"),
    ("unclosed thought is all reasoning", "<think>\nstill going\n", False, (), THINK, "still going", ""),
    ("prompt opened, cut off", "  half a thought  ", True, (), THINK, "half a thought", ""),
    ("tool opener ends an unclosed thought", "<think>plan<tool_call>{}</tool_call>", False, TOOL, THINK,
     "plan", "<tool_call>{}</tool_call>"),
    ("closer before a tool opener wins", "<think>a</think>\n<tool_call>x", False, TOOL, THINK, "a", "<tool_call>x"),
    ("inner whitespace is kept", "<think>a\n\nb</think>c\n", False, (), THINK, "a\n\nb", "c\n"),
    ("gemma 4 channel markers", "<|channel>thought\nhmm<channel|>Yes.", False, (), GEMMA4, "hmm", "Yes."),
    ("no markers: everything is content", "<think>x</think>y", False, (), None, "", "<think>x</think>y"),
    ("whitespace-only output", "  \n", False, (), THINK, "", "  \n"),
    ("a fragment of the opener is content", "<thi", False, (), THINK, "", "<thi"),
    ("a fragment of the closer is reasoning", "<think>abc</thi", False, (), THINK, "abc</thi", ""),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("text,opened,openers,markers,reasoning,content", [c[1:] for c in CASES], ids=IDS)
def test_split_reasoning_follows_llama_cpp_conventions(text, opened, openers, markers, reasoning, content):
    assert split_reasoning(text, markers, opened, openers) == (reasoning, content)


def stream(text: str, cuts: list[int], markers, opened=False, openers=()) -> tuple[str, str, list]:
    rs = ReasoningStream(markers, opened, openers)
    events, last = [], 0
    for cut in [*cuts, len(text)]:
        events += rs.feed(text[last:cut])
        last = cut
    events += rs.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return reasoning, content, events


@pytest.mark.parametrize("text,opened,openers,markers,reasoning,content", [c[1:] for c in CASES], ids=IDS)
def test_streaming_at_every_split_point_gives_the_whole_split(text, opened, openers, markers, reasoning, content):
    for cut in range(len(text) + 1):
        got = stream(text, [cut], markers, opened, openers)
        assert got[:2] == (reasoning, content), f"split at {cut}"
    one_char = stream(text, list(range(1, len(text))), markers, opened, openers)
    assert one_char[:2] == (reasoning, content)


def test_a_partial_closer_is_held_back_until_it_resolves():
    rs = ReasoningStream(THINK)
    assert rs.feed("<think>\nabc</th") == [ReasoningDelta("abc")]
    assert rs.feed("ink>\n\nDone") == [ContentDelta("Done")]


def test_a_partial_opener_at_the_start_is_not_shown_as_content():
    rs = ReasoningStream(THINK)
    assert rs.feed("<thi") == []
    assert rs.feed("nk>x") == [ReasoningDelta("x")]
    assert rs.in_reasoning


def test_trailing_whitespace_of_a_thought_waits_for_the_closer():
    rs = ReasoningStream(THINK, prompt_opened=True)
    assert rs.feed("step one\n") == [ReasoningDelta("step one")]
    assert rs.feed("step two") == [ReasoningDelta("\nstep two")]
    assert rs.feed("\n</think>\n\n") == []
    assert rs.finish() == []


def test_content_without_markers_streams_through_immediately():
    rs = ReasoningStream(None)
    assert rs.feed("<think") == [ContentDelta("<think")]


def test_markers_resolve_from_a_name_a_family_format_or_none():
    assert resolve_markers("think") == THINK
    assert resolve_markers("gemma4") == GEMMA4
    assert resolve_markers(ReasoningFormat("think", "<think>", "</think>", "markers")) == THINK
    assert resolve_markers(None) is None
    with pytest.raises(ValueError, match="harmony"):
        resolve_markers("harmony")
    with pytest.raises(KeyError, match="nonesuch"):
        resolve_markers("nonesuch")
