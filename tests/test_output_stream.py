"""Streaming output parsing: whatever the split points, the stream equals the whole parse."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.output import (
    ContentDelta,
    ReasoningDelta,
    StreamingOutputParser,
    ToolCallDelta,
    coalesce,
    delta_dict,
    parse_output,
)
from server.output.json_stream import JsonScanner, canonical_json, canonical_piece

# (reasoning format, tool format, prompt_opened, text): realistic generations
# and the edge cases the parsers promise to agree on.
FIXTURES = [
    ("think", "hermes", False,
     '<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n'
     '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n<tool_call>\n'
     '{"name": "get_time", "arguments": {"tz": "Europe/Paris", "fmt": "\\u00e9\\ud83d\\ude00", "n": [1, 2.50, -3e2]}}\n</tool_call>'),
    ("think", "hermes", True, 'Need a tool <tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}</tool_call>\nDone.'),
    ("think", "hermes", False, "<think>\n\n</think>\n\nNo tools needed: 2 + 2 = 4.\n"),
    ("think", "hermes", False, 'Sure <tool_call>{"name": "f", "arguments": {}}</tool_call> then <tool_call>bad</tool_call> x'),
    ("think", "hermes", False, '<tool_call>{"arguments": {"code": "def f():\n\treturn 1"}, "name": "write"}'),
    (None, "hermes", False, 'Use <tool_call> like <tool_call>this</tool_call>'),
    (None, "hermes", False, '<tool_call>{"name": "f", "arguments": {}}</tool_cal'),
    (None, "llama3_json", False, '\n{"name": "a", "parameters": {"q": "x y"}} ; {"name": "b", "arguments": {"k": null}}'),
    (None, "llama3_json", False, 'Let me search.<|python_tag|>{"name": "search", "parameters": {"q": "anchors"}}'),
    (None, "llama3_json", False, '{"name": "Bob", "age": 30, "tags": ["a", "b"]}'),
    (None, "llama3_json", False, '<|python_tag|>brave_search.call(query="x")'),
    (None, "mistral", False,
     'Checking. [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}, "id": "abcdefghi"}, {"name": "b", "arguments": {}}] ok'),
    (None, "mistral", False, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS] {}'),
    (None, "mistral", False, "[TOOL_CALLS]bad name[ARGS]{}"),
    (None, "mistral", False, '[TOOL_CALLS]ns:get.weather-2[ARGS]{"city": "Paris"}'),
    (None, "mistral", False, "[TOOL_CALLS][]"),
    (None, "mistral", False, "[TOOL_CALLS]f[ARG"),
    ("think", None, False, "<think>plain reasoning</think>plain answer"),
    (None, None, False, "no parsing at all <think> <tool_call>"),
]


def run_stream(reasoning, tools, opened, text, cuts, new_id=None):
    ids = itertools.count()
    parser = StreamingOutputParser(reasoning, tools, opened, new_id=new_id or (lambda: f"call_{next(ids)}"))
    events, last = [], 0
    for cut in [*sorted(cuts), len(text)]:
        events += parser.feed(text[last:cut])
        last = cut
    events += parser.finish()
    return parser, events


def collect(events):
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    calls: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, ToolCallDelta):
            if e.id is not None:
                assert e.index not in calls, "a call is announced once"
                calls[e.index] = [e.name, ""]
            calls[e.index][1] += e.arguments
    assert sorted(calls) == list(range(len(calls))), "indexes count up from 0"
    return reasoning, content, [tuple(calls[i]) for i in sorted(calls)]


def whole(reasoning, tools, opened, text, cut=False):
    out = parse_output(text, reasoning, tools, opened, cut=cut)
    return out.reasoning, out.content, [(c.name, c.arguments) for c in out.tool_calls]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f"{f[1]}-{i}" for i, f in enumerate(FIXTURES)])
def test_reading_a_generation_as_cut_changes_nothing_unless_a_call_was_left_open(fixture):
    reasoning, tools, opened, text = fixture[:4]
    assert whole(reasoning, tools, opened, text, cut=True) == whole(reasoning, tools, opened, text)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f"{f[1]}-{i}" for i, f in enumerate(FIXTURES)])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_streamed_events_concatenate_to_the_whole_parse_at_any_split_points(fixture, data):
    reasoning, tools, opened, text = fixture
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=12))
    _, events = run_stream(reasoning, tools, opened, text, cuts)
    assert collect(events) == whole(reasoning, tools, opened, text)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f"{f[1]}-{i}" for i, f in enumerate(FIXTURES)])
def test_streaming_one_character_at_a_time_equals_the_whole_parse(fixture):
    reasoning, tools, opened, text = fixture
    _, events = run_stream(reasoning, tools, opened, text, range(1, len(text)))
    assert collect(events) == whole(reasoning, tools, opened, text)


def test_a_call_is_announced_with_id_and_name_before_its_arguments_stream_in_pieces():
    text = '<tool_call>{"name": "write", "arguments": {"path": "a.txt", "body": "' + "x" * 40 + '"}}</tool_call>'
    _, events = run_stream(None, "hermes", False, text, range(5, len(text), 5))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0] == ToolCallDelta(0, "", "call_0", "write")
    assert all(e.id is None and e.name is None for e in calls[1:])
    assert len(calls) > 5, "arguments arrive in several pieces, not at the end"
    assert "".join(e.arguments for e in calls) == '{"path": "a.txt", "body": "' + "x" * 40 + '"}'


def test_text_that_may_start_an_opener_is_held_back_until_disambiguated():
    parser = StreamingOutputParser(None, "hermes")
    assert parser.feed("Hello <tool") == [ContentDelta("Hello")]
    assert parser.feed("box> ok") == [ContentDelta(" <toolbox> ok")]
    parser = StreamingOutputParser(None, "hermes")
    assert parser.feed("Hi\n<tool") == [ContentDelta("Hi")]
    assert parser.feed('_call>{"name": "f"') == []
    assert not parser.has_tool_calls


def test_has_tool_calls_turns_on_when_a_call_is_announced():
    parser = StreamingOutputParser("think", "hermes")
    parser.feed('<think>x</think><tool_call>{"name": "f", ')
    assert not parser.has_tool_calls
    parser.feed('"arguments": {')
    assert parser.has_tool_calls
    parser.feed("}}</tool_call>")
    parser.finish()
    assert parser.has_tool_calls


def test_a_call_cut_short_after_it_was_announced_stays_a_call_streamed_and_whole_when_max_tokens_cut_it():
    text = '<think>plan</think>Sure.<tool_call>{"name": "f", "arguments": {"city": "Par'
    _, events = run_stream("think", "hermes", False, text, [30])
    assert collect(events) == ("plan", "Sure.", [("f", '{"city": "Par')])
    assert whole("think", "hermes", False, text, cut=True) == collect(events)  # the response at max_tokens
    assert whole("think", "hermes", False, text) == ("plan", "Sure." + text[len("<think>plan</think>Sure."):], [])


@pytest.mark.parametrize("cut", ['"cit', '"city": 12', '"city": tr', '"city": "Par'],
                         ids=["in a key", "in a number", "in a literal", "in a string"])
def test_a_call_cut_short_streams_its_arguments_as_far_as_the_model_wrote_them(cut):
    text = '<tool_call>{"name": "f", "arguments": {' + cut
    for split in ([len(text) - len(cut)], [len(text) - 2], range(1, len(text))):
        _, events = run_stream(None, "hermes", False, text, split)
        assert collect(events) == ("", "", [("f", "{" + cut)]), split


@pytest.mark.parametrize("tail", ['"name": "f"', '"name": "f", ', '"name": "f", "arguments":', '"name": "f", "argu'])
def test_a_call_cut_after_its_name_before_its_arguments_is_a_call_with_none_not_markup_as_text(tail):
    text = 'Sure. <tool_call>\n{' + tail
    for split in ([len(text)], range(1, len(text))):
        _, events = run_stream(None, "hermes", False, text, split)
        assert collect(events) == ("", "Sure.", [("f", "")]), split
    assert whole(None, "hermes", False, text, cut=True) == ("", "Sure.", [("f", "")])
    # Cut inside the name, it is no call yet: the text stays the answer's, as vLLM and llama.cpp leave it.
    assert whole(None, "hermes", False, 'Sure. <tool_call>\n{"name": "f', cut=True)[2] == []


def test_a_cut_call_is_ended_once_a_second_finish_adds_nothing():
    parser = StreamingOutputParser(None, "hermes")
    parser.feed('<tool_call>{"name": "f", "arguments": {"n": 4')
    assert parser.finish() == [ToolCallDelta(0, arguments="4")]
    assert parser.finish() == []


def test_a_syntax_error_after_the_announcement_ends_the_call_and_the_rest_is_content():
    text = '<tool_call>{"name": "f", "arguments": {"a": 1 2}}</tool_call>'
    _, events = run_stream(None, "hermes", False, text, [text.index(" 2")])
    assert collect(events) == ("", "2}}</tool_call>", [("f", '{"a": 1')])
    # Within one delta the error is seen before the announcement: no call at all.
    _, events = run_stream(None, "hermes", False, text, [])
    assert collect(events) == whole(None, "hermes", False, text) == ("", text, [])


def test_coalesce_merges_neighbours_but_keeps_the_announcement_alone():
    merged = coalesce([
        ReasoningDelta("a"), ReasoningDelta("b"), ContentDelta("c"), ContentDelta("d"),
        ToolCallDelta(0, "", "call_x", "f"), ToolCallDelta(0, "{"), ToolCallDelta(0, "}"),
        ToolCallDelta(1, "", "call_y", "g"),
    ])
    assert merged == [
        ReasoningDelta("ab"), ContentDelta("cd"), ToolCallDelta(0, "", "call_x", "f"),
        ToolCallDelta(0, "{}"), ToolCallDelta(1, "", "call_y", "g"),
    ]


def test_delta_dicts_have_the_openai_shape():
    assert delta_dict(ReasoningDelta("r")) == {"reasoning_content": "r"}
    assert delta_dict(ContentDelta("c")) == {"content": "c"}
    assert delta_dict(ToolCallDelta(1, "", "call_1", "f")) == {
        "tool_calls": [{"index": 1, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]
    }
    assert delta_dict(ToolCallDelta(1, '{"a"')) == {"tool_calls": [{"index": 1, "function": {"arguments": '{"a"'}}]}


# ---- the JSON scanner under the argument streaming ---------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(value=json_values, ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]), data=st.data())
def test_the_scanner_re_serialises_any_json_like_json_dumps_at_any_split(value, ascii_only, indent, data):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    scanner, pieces, used, last = JsonScanner(), [], 0, 0
    for cut in [*cuts, len(text)]:
        used += scanner.feed(text[last:cut])
        last = cut
        pieces += [canonical_piece(k, p) for k, p in scanner.take_events()]
    scanner.finish()  # a top-level number ends only here
    pieces += [canonical_piece(k, p) for k, p in scanner.take_events()]
    assert scanner.error is None and scanner.done
    assert used == len(text) or text[used:].strip() == ""
    assert "".join(pieces) == canonical_json(value)


@pytest.mark.parametrize("bad", [
    '{"a": 01}', '{"a": 1,}', "{'a': 1}", '{"a": tru}', '{"a": 1e400}', '{"a": NaN}', '{"a" 1}',
    '[1 2]', '{"a": "\\x"}', '{"a": "\\u12G4"}', '{"a": .5}', '{"a": -}',
])
def test_the_scanner_rejects_what_json_rejects(bad):
    scanner = JsonScanner()
    scanner.feed(bad)
    scanner.finish()
    assert scanner.error is not None
    with pytest.raises(ValueError):
        from server.output.json_stream import DECODER

        DECODER.decode(bad)


def test_the_scanner_stops_at_the_end_of_the_value_and_leaves_the_rest():
    scanner = JsonScanner()
    assert scanner.feed('{"a": [1]}  </tool_call>') == len('{"a": [1]}')
    assert scanner.done


def _split_read(text: str, at: int, fmt: str = "hermes") -> tuple[str, str]:
    """Content and the one call's arguments, `text` fed in two pieces cut at `at`."""
    parser = StreamingOutputParser(None, fmt, False)
    events = parser.feed(text[:at]) + parser.feed(text[at:]) + parser.finish()
    return ("".join(e.text for e in events if isinstance(e, ContentDelta)),
            "".join(e.arguments or "" for e in events if isinstance(e, ToolCallDelta)))


CALL_HEAD = '<tool_call>{"name": "f", "arguments": {'


@pytest.mark.parametrize("tail", ['"a": tru}', '"a": 1.}', '"a": -}', '"a": nulx}', '"a": "b\\q"}', '"a": "b\\u12x"}',
                                  '"ab\\q": 1}'])
def test_a_call_the_stream_announced_and_the_model_then_broke_loses_no_character(tail):
    # What the scanner held when the JSON broke (a literal, a number, an escape) ends the arguments; the
    # character that broke it and the rest are content: together they are the model's text.
    content, arguments = _split_read(CALL_HEAD + tail, len(CALL_HEAD))
    assert arguments[1:] + content == tail


def test_a_whole_answer_read_from_its_events_pieces_keeps_the_broken_call_its_stream_announced():
    text = CALL_HEAD + '"loud": True}}</tool_call>'
    whole = parse_output(text, None, "hermes", False, cut=True, pieces=[CALL_HEAD, text[len(CALL_HEAD):]])
    content, arguments = _split_read(text, len(CALL_HEAD))
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [("f", arguments)] and whole.content == content
    # Read in one piece, nothing was announced before it broke: the block is the answer's text.
    assert parse_output(text, None, "hermes", False, cut=True).content == text


def test_string_text_before_a_half_surrogate_pair_is_kept_when_the_text_ends_there():
    text = '<tool_call>{"name": "post", "arguments": {"text": "Great news everyone \\ud83d'
    want = '{"text": "Great news everyone \\ud83d'
    assert [c.arguments for c in parse_output(text, None, "hermes", False, cut=True).tool_calls] == [want]
    for at in (len(text) - 12, len(text) - 3):
        assert _split_read(text, at)[1] == want
