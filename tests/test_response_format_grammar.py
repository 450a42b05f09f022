"""response_format json_object / json_schema: the answer is JSON of the schema, after any thought."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from models.grammar_vocabulary import grammar_vocabulary
from models.response_format_grammar import ResponseGrammar, TurnCalls, response_grammar, value_grammar
from models.tool_call_grammar import CallGrammarVocabulary, call_blocks

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["city", "n"]}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ROOT / "models" / "demo" / "checkpoint")


@pytest.fixture(scope="module")
def ids(tokenizer):
    return {t: tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>", "<|im_end|>", "<tool_call>", "</tool_call>")}


def _grammar(tokenizer, ids, thought_open=False, schema=SCHEMA) -> ResponseGrammar:
    text = response_grammar(schema, (ids["<think>"], ids["</think>"]), thought_open)
    return ResponseGrammar(text, grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]]))


def _allowed(grammar: ResponseGrammar, token: int) -> bool:
    words = grammar.allowed_tokens()
    return bool((int(words[token // 32]) >> (token % 32)) & 1)


def _feed(grammar, tokenizer, text: str, specials: list[int] = ()) -> None:
    for token in list(specials) + tokenizer.encode(text, add_special_tokens=False):
        assert _allowed(grammar, token), repr(tokenizer.decode([token]))
        grammar.accept(token)


def test_a_thought_stays_free_and_the_answer_after_it_must_fit_the_schema(tokenizer, ids):
    grammar = _grammar(tokenizer, ids)
    _feed(grammar, tokenizer, "Anything at all: {not json, [or] \"quoted\"\n", [ids["<think>"]])
    assert not _allowed(grammar, ids["<tool_call>"])  # special tokens other than the closer are not text
    _feed(grammar, tokenizer, "\n\n", [ids["</think>"]])
    assert not _allowed(grammar, tokenizer.encode("Sure", add_special_tokens=False)[0])
    assert not _allowed(grammar, ids["<tool_call>"])
    _feed(grammar, tokenizer, '{\n  "city": "Oslo",\n  "n": 3\n}')
    assert grammar.allowed_tokens() is None and grammar.forced_token() == ids["<|im_end|>"]
    grammar.accept(ids["<|im_end|>"])
    assert grammar.forced_token() is None


def test_a_prompt_that_opened_the_thought_starts_the_turn_inside_it(tokenizer, ids):
    grammar = _grammar(tokenizer, ids, thought_open=True)
    assert _allowed(grammar, tokenizer.encode("Let", add_special_tokens=False)[0])
    assert not _allowed(grammar, ids["<think>"])
    _feed(grammar, tokenizer, "Let me see.\n", [])
    _feed(grammar, tokenizer, '{"city": "Oslo", "n": 3}', [ids["</think>"]])
    assert grammar.forced_token() == ids["<|im_end|>"]


def test_the_turn_may_skip_the_thought_but_not_the_schema(tokenizer, ids):
    grammar = _grammar(tokenizer, ids)
    _feed(grammar, tokenizer, '{"city": "Oslo"')
    assert not _allowed(grammar, tokenizer.encode("}", add_special_tokens=False)[0])  # "n" is required
    assert not _allowed(grammar, ids["<|im_end|>"])


def test_json_whitespace_is_bounded_as_llama_cpps_is(tokenizer, ids):
    grammar = _grammar(tokenizer, ids, schema={"type": "object"})
    _feed(grammar, tokenizer, "{" + "\n" + " " * 20)
    assert not _allowed(grammar, tokenizer.encode(" ", add_special_tokens=False)[0])


def test_every_schema_the_api_accepts_compiles_or_is_reported(tokenizer, ids):
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]])
    assert grammars.error(response_grammar({"type": "object"}, None, False)) is None
    bad = grammars.error(response_grammar({"type": "string", "pattern": "(?<=a)b"}, None, False))
    assert bad and "look-around" in bad and "\n" not in bad


def test_a_schema_whose_values_cannot_begin_is_told_apart_from_one_that_has_values(tokenizer, ids):
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]])
    why = grammars.start_error(value_grammar({"$ref": "#"}))
    assert why and "\n" not in why
    assert grammars.start_error(value_grammar({"type": "object", "properties": {"x": {"$ref": "#"}}})) is None
    assert grammars.start_error(value_grammar({"type": "string"})) is None


def test_a_thought_the_prompt_opened_with_multi_token_markers_is_refused_by_name(tokenizer, ids):
    from types import SimpleNamespace

    from server.engine_params import _response_grammar, thought_tokens
    from server.errors import NotSupportedError
    from server.protocol.chat import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                "response_format": {"type": "json_object"}})
    markers = SimpleNamespace(start="<think>", end="</think>")
    split = thought_tokens(markers, lambda text: [5, 6])  # markers as two tokens each
    assert split is None
    info = SimpleNamespace(grammars=grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]]),
                           reasoning=markers, thought_tokens=split)
    state = SimpleNamespace(info=info, tokenizer=None)
    with pytest.raises(NotSupportedError, match="single tokens"):
        _response_grammar(req, state, reasoning_open=True)
    assert "%json" in _response_grammar(req, state, reasoning_open=False)  # no thought allowed, JSON at once


def test_single_token_thought_markers_are_found_once_from_the_tokenizer(tokenizer, ids):
    from types import SimpleNamespace

    from server.engine_params import thought_tokens

    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    assert thought_tokens(SimpleNamespace(start="<think>", end="</think>"), encode) == (ids["<think>"],
                                                                                      ids["</think>"])
    assert thought_tokens(None, encode) is None
    assert thought_tokens(SimpleNamespace(start="", end=""), encode) is None


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _with_calls(tokenizer, ids, required=False, single=False) -> ResponseGrammar:
    vocabulary = CallGrammarVocabulary(grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]]),
                                       ids["<tool_call>"], ids["</tool_call>"])
    calls = TurnCalls(call_blocks(WEATHER, vocabulary, single), required, single)
    text = response_grammar(SCHEMA, (ids["<think>"], ids["</think>"]), False, calls)
    return ResponseGrammar(text, grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]]))


def test_with_tools_offered_the_turn_may_call_them_instead_of_answering(tokenizer, ids):
    grammar = _with_calls(tokenizer, ids)
    _feed(grammar, tokenizer, "Weather first.", [ids["<think>"]])
    _feed(grammar, tokenizer, "\n\n", [ids["</think>"]])
    assert not _allowed(grammar, tokenizer.encode("Sure", add_special_tokens=False)[0])  # no prose
    _feed(grammar, tokenizer, '\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n', [ids["<tool_call>"]])
    _feed(grammar, tokenizer, '\n', [ids["</tool_call>"]])  # a parallel call may follow
    _feed(grammar, tokenizer, '\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n', [ids["<tool_call>"]])
    grammar.accept(ids["</tool_call>"])
    assert _allowed(grammar, ids["<|im_end|>"])
    assert not _allowed(grammar, ids["<tool_call>"])  # a newline separates parallel calls


def test_with_parallel_tool_calls_false_a_json_answer_turn_ends_after_one_call(tokenizer, ids):
    grammar = _with_calls(tokenizer, ids, single=True)
    _feed(grammar, tokenizer, '\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n', [ids["<tool_call>"]])
    grammar.accept(ids["</tool_call>"])
    assert grammar.allowed_tokens() is None and grammar.forced_token() == ids["<|im_end|>"]


def test_a_call_in_a_json_answer_turn_must_name_an_offered_tool_and_fit_its_parameters(tokenizer, ids):
    grammar = _with_calls(tokenizer, ids)
    _feed(grammar, tokenizer, '\n{"name": "get_', [ids["<tool_call>"]])
    assert not _allowed(grammar, tokenizer.encode("time", add_special_tokens=False)[0])
    _feed(grammar, tokenizer, 'weather", "arguments": {"')
    assert _allowed(grammar, tokenizer.encode("city", add_special_tokens=False)[0])
    assert not _allowed(grammar, tokenizer.encode("n", add_special_tokens=False)[0])  # not get_weather's


def test_with_tools_offered_the_answer_is_still_json_of_the_schema(tokenizer, ids):
    grammar = _with_calls(tokenizer, ids)
    _feed(grammar, tokenizer, '{"city": "Oslo", "n": 3}')
    assert grammar.forced_token() == ids["<|im_end|>"]


def test_when_a_call_is_required_the_json_answer_is_not_an_alternative(tokenizer, ids):
    grammar = _with_calls(tokenizer, ids, required=True)
    assert not _allowed(grammar, tokenizer.encode("{", add_special_tokens=False)[0])
    assert _allowed(grammar, ids["<tool_call>"])


def test_json_with_tools_is_one_turn_grammar_and_refused_by_name_without_a_call_grammar(tokenizer, ids):
    from types import SimpleNamespace

    from models.tool_call_grammar import CallGrammarVocabulary
    from server.engine_params import _response_grammar, _tool_grammar
    from server.errors import NotSupportedError
    from server.protocol.chat import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                "response_format": {"type": "json_object"}, "tools": WEATHER})
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]])
    info = SimpleNamespace(grammars=grammars, thought_tokens=(ids["<think>"], ids["</think>"]), call_grammar=None,
                           spec=SimpleNamespace(model_type="llama"))
    state = SimpleNamespace(info=info)
    with pytest.raises(NotSupportedError, match="together with tools needs a tool-call grammar") as refused:
        _response_grammar(req, state, reasoning_open=False)
    assert refused.value.param == "response_format"
    info.call_grammar = CallGrammarVocabulary(grammars, ids["<tool_call>"], ids["</tool_call>"])
    grammar = _response_grammar(req, state, reasoning_open=False)
    assert "(answer | calls)" in grammar and "get_weather" in grammar
    assert _tool_grammar(req, state) is None  # the turn's grammar already constrains the calls
    none = req.model_copy(update={"tool_choice": "none"})
    assert "calls" not in _response_grammar(none, state, reasoning_open=False)


def test_a_tool_schema_the_engine_cannot_enforce_is_refused_by_its_own_field_not_the_formats(tokenizer, ids):
    from types import SimpleNamespace

    from models.tool_call_grammar import CallGrammarVocabulary
    from server.engine_params import _response_grammar
    from server.errors import InvalidRequestError
    from server.protocol.chat import ChatCompletionRequest

    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                "response_format": {"type": "json_object"}, "tools": WEATHER + [odd]})
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [ids["<|im_end|>"]])
    info = SimpleNamespace(grammars=grammars, thought_tokens=(ids["<think>"], ids["</think>"]),
                           call_grammar=CallGrammarVocabulary(grammars, ids["<tool_call>"], ids["</tool_call>"]),
                           spec=SimpleNamespace(model_type="qwen3"))
    with pytest.raises(InvalidRequestError, match="look-around") as refused:
        _response_grammar(req, SimpleNamespace(info=info), reasoning_open=False)
    assert refused.value.param == "tools.1.function.parameters"


def test_an_answer_object_takes_only_its_declared_keys_as_llama_cpps_grammar_does(tokenizer, ids):
    # JSON Schema's default admits any other key: a small model then wrote keys nobody parses until max_tokens.
    nested = {"type": "object", "properties": {"where": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    grammar = _grammar(tokenizer, ids, schema=nested)
    _feed(grammar, tokenizer, '{"where": {"city": "Oslo"')
    assert not _allowed(grammar, tokenizer.encode(",", add_special_tokens=False)[0])
    _feed(grammar, tokenizer, "}")
    assert not _allowed(grammar, tokenizer.encode(",", add_special_tokens=False)[0])
    _feed(grammar, tokenizer, "}")
    assert grammar.forced_token() == ids["<|im_end|>"]


def _sixteen_digits_then_no_more(grammar, tokenizer, digit: str) -> None:
    token = tokenizer.encode(digit, add_special_tokens=False)[0]
    for _ in range(16):
        assert _allowed(grammar, token)
        grammar.accept(token)
    assert not _allowed(grammar, token)


def test_an_unbounded_integer_answer_stops_at_sixteen_digits_as_llama_cpps_grammar_does(tokenizer, ids):
    grammar = _grammar(tokenizer, ids)
    _feed(grammar, tokenizer, '{"city": "Oslo", "n": ')
    _sixteen_digits_then_no_more(grammar, tokenizer, "4")


def test_a_json_object_answer_holds_its_numbers_to_sixteen_digits_at_any_depth(tokenizer, ids):
    grammar = _grammar(tokenizer, ids, schema={"type": "object"})  # what response_format json_object asks for
    _feed(grammar, tokenizer, '{"a": [{"b": -')
    _sixteen_digits_then_no_more(grammar, tokenizer, "1")


def test_a_number_answer_stops_at_sixteen_digits_after_its_point_as_llama_cpps_grammar_does(tokenizer, ids):
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "s": {"type": "string"}}, "required": ["x", "s"]}
    grammar = _grammar(tokenizer, ids, schema=schema)
    _feed(grammar, tokenizer, '{"x": 0.')
    _sixteen_digits_then_no_more(grammar, tokenizer, "3")
    _feed(grammar, tokenizer, ', "s": "pi is 3.')  # inside a string digits stay free
    three = tokenizer.encode("3", add_special_tokens=False)[0]
    for _ in range(20):
        assert _allowed(grammar, three)
        grammar.accept(three)


@pytest.mark.parametrize("schema, text", [
    ({"type": "string", "minLength": 30}, '"3.14159265358979323846264 is pi"'),  # a string that cannot close yet
    ({"type": "object", "properties": {"v1.123456789012345678": {"type": "integer"}}}, '{"v1.123456789012345678": 1}'),
    ({"type": "object", "properties": {"n": {"type": "number"}}}, '{"n": 2.5}'),
])
def test_digits_inside_strings_and_keys_stay_free_however_many_follow_a_point(tokenizer, ids, schema, text):
    _feed(_grammar(tokenizer, ids, schema=schema), tokenizer, text)


def test_a_quote_left_open_in_the_thought_does_not_hide_the_answers_numbers_from_the_bound(tokenizer, ids):
    grammar = _grammar(tokenizer, ids, schema={"type": "object", "properties": {"x": {"type": "number"}}})
    _feed(grammar, tokenizer, 'He said "pi is 3.', specials=[ids["<think>"]])
    _feed(grammar, tokenizer, '{"x": 0.', specials=[ids["</think>"]])
    _sixteen_digits_then_no_more(grammar, tokenizer, "3")
