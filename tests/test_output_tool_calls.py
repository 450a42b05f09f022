"""Tool-call formats parsed from whole text: hermes, llama3_json, mistral."""

from __future__ import annotations

import json
import re

import pytest

from server.output import ParsedToolCall, get_tool_parser, new_call_id, parse_output, tool_parser_names

W = '{"city": "Paris"}'


def call(name: str, arguments: str = "{}") -> ParsedToolCall:
    return ParsedToolCall(name, arguments)


# (case, format, text, expected content, expected calls)
CASES = [
    # hermes
    ("hermes: one call after content", "hermes",
     'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me check.", [call("get_weather", W)]),
    ("hermes: two calls, whitespace between dropped", "hermes",
     '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call>\n',
     "", [call("a"), call("b", '{"x": 1}')]),
    ("hermes: arguments are re-serialised", "hermes",
     '<tool_call>{"name":"f","arguments":{"a":1.50,"b":"\\u00e9","c":[true,null]}}</tool_call>',
     "", [call("f", '{"a": 1.5, "b": "é", "c": [true, null]}')]),
    ("hermes: invalid JSON stays content", "hermes",
     'Sure.\n<tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call>',
     'Sure.\n<tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call>', []),
    ("hermes: arguments that are not an object stay content", "hermes",
     '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
     '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', []),
    ("hermes: a call without arguments stays content", "hermes",
     '<tool_call>{"name": "f"}</tool_call>', '<tool_call>{"name": "f"}</tool_call>', []),
    ("hermes: an empty name stays content", "hermes",
     '<tool_call>{"name": "", "arguments": {}}</tool_call>', '<tool_call>{"name": "", "arguments": {}}</tool_call>', []),
    ("hermes: a missing closer is forgiven", "hermes",
     '<tool_call>\n{"name": "f", "arguments": {}}', "", [call("f")]),
    ("hermes: a closer inside a string is data", "hermes",
     '<tool_call>{"name": "echo", "arguments": {"s": "</tool_call>"}}</tool_call>',
     "", [call("echo", '{"s": "</tool_call>"}')]),
    ("hermes: a call cut short is content", "hermes",
     'x <tool_call>{"name": "f", "arguments": {"a": ', 'x <tool_call>{"name": "f", "arguments": {"a": ', []),
    ("hermes: after a broken call everything is content", "hermes",
     '<tool_call>nope</tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>',
     '<tool_call>nope</tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>', []),
    ("hermes: a good call then a broken one", "hermes",
     '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n<tool_call>[1]</tool_call>',
     "<tool_call>[1]</tool_call>", [call("f")]),
    ("hermes: content on both sides keeps its separator", "hermes",
     'Sure <tool_call>{"name": "f", "arguments": {}}</tool_call> done', "Sure done", [call("f")]),
    ("hermes: name after arguments", "hermes",
     '<tool_call>{"arguments": {"k": [1, 2]}, "name": "f", "extra": {"ignored": true}}</tool_call>',
     "", [call("f", '{"k": [1, 2]}')]),
    ("hermes: raw newline inside a string is accepted", "hermes",
     '<tool_call>{"name": "write", "arguments": {"code": "a\nb"}}</tool_call>', "", [call("write", '{"code": "a\\nb"}')]),
    ("hermes: plain text", "hermes", "Hello there.\n", "Hello there.\n", []),
    # llama3_json
    ("llama3: python_tag call", "llama3_json",
     '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [call("get_weather", W)]),
    ("llama3: bare JSON call as the whole message", "llama3_json",
     ' {"name": "get_weather", "parameters": {"city": "Paris"}}', "", [call("get_weather", W)]),
    ("llama3: several calls separated by semicolons", "llama3_json",
     '{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": 2}}', "", [call("a"), call("b", '{"x": 2}')]),
    ("llama3: a JSON answer is not a call", "llama3_json",
     '{"name": "Bob", "age": 3}', '{"name": "Bob", "age": 3}', []),
    ("llama3: a brace later in the text is content", "llama3_json",
     'Here: {"name": "a", "parameters": {}}', 'Here: {"name": "a", "parameters": {}}', []),
    ("llama3: built-in python call stays content", "llama3_json",
     '<|python_tag|>brave_search.call(query="x")', '<|python_tag|>brave_search.call(query="x")', []),
    ("llama3: content before the tag is kept", "llama3_json",
     'Checking.\n<|python_tag|>{"name": "a", "parameters": {}}', "Checking.", [call("a")]),
    ("llama3: a broken second call leaves the first", "llama3_json",
     '{"name": "a", "parameters": {}}; {"name": 5, "parameters": {}}', '{"name": 5, "parameters": {}}', [call("a")]),
    # mistral
    ("mistral: list form", "mistral",
     'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, {"name": "t", "arguments": {}}]',
     "Checking.", [call("get_weather", W), call("t")]),
    ("mistral: v11 name form, two calls", "mistral",
     '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]t[ARGS]{}', "", [call("get_weather", W), call("t")]),
    ("mistral: v11 with whitespace after the marker", "mistral",
     '[TOOL_CALLS] get_weather[ARGS] {"city":"Paris"}', "", [call("get_weather", W)]),
    ("mistral: a v11 name may hold every character a tool name may (: . -)", "mistral",
     '[TOOL_CALLS]ns:get.weather-2[ARGS]{"city": "Paris"}', "", [call("ns:get.weather-2", W)]),
    ("mistral: a bad function name stays content", "mistral",
     '[TOOL_CALLS]get weather[ARGS]{}', '[TOOL_CALLS]get weather[ARGS]{}', []),
    ("mistral: an empty list is not a call", "mistral", "[TOOL_CALLS][]", "[TOOL_CALLS][]", []),
    ("mistral: invalid list stays content", "mistral",
     '[TOOL_CALLS][{"name": "a", "arguments": {]', '[TOOL_CALLS][{"name": "a", "arguments": {]', []),
    ("mistral: v11 arguments must be an object", "mistral",
     "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]f[ARGS][1]", []),
]


@pytest.mark.parametrize("fmt,text,content,calls", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_format_parses_whole_text_into_content_and_calls(fmt, text, content, calls):
    assert get_tool_parser(fmt).parse(text) == (content, calls)


@pytest.mark.parametrize("fmt,text,content,calls", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parsed_arguments_are_always_a_json_object_string(fmt, text, content, calls):
    for parsed in get_tool_parser(fmt).parse(text)[1]:
        assert isinstance(json.loads(parsed.arguments), dict)


def test_reasoning_and_a_call_from_inside_an_unclosed_thought_are_both_found():
    out = parse_output(
        '<think>\nI need the weather.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        reasoning_format="think",
        tool_format="hermes",
    )
    assert out.reasoning == "I need the weather."
    assert out.content == ""
    assert out.tool_calls == [call("get_weather", W)]


def test_the_payload_gives_each_call_an_id_from_the_callers_factory():
    out = parse_output('<tool_call>{"name": "f", "arguments": {}}</tool_call>', tool_format="hermes")
    payload = out.tool_calls_payload(new_id=lambda: "call_fixed")
    assert payload == [{"id": "call_fixed", "type": "function", "function": {"name": "f", "arguments": "{}"}}]


def test_default_call_ids_look_like_openais():
    ids = {new_call_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids)


def test_the_registry_names_every_format_and_refuses_unknown_ones():
    assert tool_parser_names() == ("hermes", "llama3_json", "mistral")
    with pytest.raises(KeyError, match="hermes"):
        get_tool_parser("glm45")
