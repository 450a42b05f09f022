"""Once the model opens a tool call, the call must fit one of the offered tools (models.tool_call_grammar)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from models.grammar_vocabulary import grammar_vocabulary
from models.sampler import new_state, sample
from models.tool_call_grammar import (
    ToolCallGrammar,
    call_blocks,
    call_grammar,
    call_grammar_vocabulary,
    hermes_call_grammar,
    mistral_args_token,
)
from scheduler.sampling_params import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
TOOLS = json.loads((ROOT / "configs" / "demo_tools.json").read_text())


@pytest.fixture(scope="module")
def tokenizer():
    # The demo checkpoint's tokenizer: byte-level BPE with <tool_call> and </tool_call> single tokens.
    return AutoTokenizer.from_pretrained(ROOT / "models" / "demo" / "checkpoint")


@pytest.fixture(scope="module")
def vocabulary(tokenizer):
    found = call_grammar_vocabulary(grammar_vocabulary(tokenizer, len(tokenizer), [2]), "hermes",
                                    tokenizer.convert_tokens_to_ids("<tool_call>"),
                                    lambda t: tokenizer.encode(t, add_special_tokens=False))
    assert found is not None
    return found


def _grammar(vocabulary, tools=TOOLS) -> ToolCallGrammar:
    return ToolCallGrammar(hermes_call_grammar(tools, vocabulary.closer), vocabulary)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _allowed(grammar: ToolCallGrammar) -> set[int]:
    words = grammar.allowed_tokens()
    return {t for t in range(32 * len(words)) if (int(words[t // 32]) >> (t % 32)) & 1}


def _feed(grammar: ToolCallGrammar, ids: list[int]) -> None:
    for token in ids:
        assert token in _allowed(grammar), token
        grammar.accept(token)


def test_nothing_is_constrained_until_the_model_opens_a_call(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    for token in _ids(tokenizer, "I will look it up."):
        grammar.accept(token)
        assert grammar.allowed_tokens() is None
    grammar.accept(vocabulary.opener)
    assert grammar.armed and grammar.allowed_tokens() is not None


def test_inside_a_call_only_an_offered_tool_name_can_follow(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "'))
    allowed = _allowed(grammar)
    assert _ids(tokenizer, "get")[0] in allowed
    assert _ids(tokenizer, "Oslo")[0] not in allowed
    assert vocabulary.closer not in allowed


def test_a_call_that_fits_its_schema_passes_token_by_token_and_its_closer_disarms_the_grammar(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "convert_units", "arguments": {"value": 5, "from_unit": "km", '
                                   '"to_unit": "miles"}}\n') + [vocabulary.closer])
    assert not grammar.armed and grammar.allowed_tokens() is None


def test_an_enum_argument_admits_only_its_values_and_a_required_one_cannot_be_skipped(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "calculate", "arguments": {"a": 3, "op": "'))
    texts = {tokenizer.decode([t]) for t in _allowed(grammar)}
    assert texts and all(text[:1] in "+-*/" for text in texts), texts
    _feed(grammar, _ids(tokenizer, '*", "b": 4'))
    assert _ids(tokenizer, "}}\n")[0] in _allowed(grammar)

    skipping = _grammar(vocabulary)
    skipping.accept(vocabulary.opener)
    _feed(skipping, _ids(tokenizer, '\n{"name": "calculate", "arguments": {"a": 3'))
    assert _ids(tokenizer, "}}\n")[0] not in _allowed(skipping)  # "op" and "b" are required


def test_a_second_opener_arms_the_grammar_again_for_a_parallel_call(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    call = [vocabulary.opener] + _ids(tokenizer, '\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n') + [
        vocabulary.closer]
    for token in call + _ids(tokenizer, "\n"):
        grammar.accept(token)
    assert not grammar.armed
    grammar.accept(vocabulary.opener)
    assert grammar.armed
    _feed(grammar, call[1:])
    assert not grammar.armed


def test_with_parallel_tool_calls_false_the_turn_ends_right_after_the_first_call(tokenizer, vocabulary):
    call = _ids(tokenizer, '\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n') + [vocabulary.closer]
    single = ToolCallGrammar(hermes_call_grammar(TOOLS, vocabulary.closer), vocabulary, single=True)
    single.accept(vocabulary.opener)
    _feed(single, call)
    end = vocabulary.grammars.end_of_turn
    assert single.forced_token() == end
    single.accept(end)
    assert single.forced_token() is None
    parallel = _grammar(vocabulary)
    parallel.accept(vocabulary.opener)
    _feed(parallel, call)
    assert parallel.forced_token() is None  # a second call may follow


def test_a_forced_token_the_grammar_refuses_disarms_it_rather_than_failing_the_request(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    grammar.accept(vocabulary.opener)
    grammar.accept(_ids(tokenizer, "Oslo")[0])  # as if another processor had forced it
    assert not grammar.armed and grammar.allowed_tokens() is None


def test_the_sampler_takes_the_best_token_the_grammar_allows(tokenizer, vocabulary):
    grammar = _grammar(vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "'))
    wanted = _ids(tokenizer, "get")[0]
    logits = torch.zeros(1, len(tokenizer))
    logits[0, _ids(tokenizer, "Oslo")[0]] = 10.0  # the model's favourite, not a tool name
    logits[0, wanted] = 1.0
    params = SamplingParams(max_tokens=4, temperature=0.0)
    [greedy] = sample(logits, [new_state(params, 0, [grammar])], [([], [])])
    assert greedy.token == wanted


def test_a_named_tool_choice_narrows_the_grammar_to_that_tool(tokenizer, vocabulary):
    weather = [tool for tool in TOOLS if tool["function"]["name"] == "get_weather"]
    grammar = _grammar(vocabulary, weather)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "get_'))
    texts = {tokenizer.decode([t]) for t in _allowed(grammar)}
    assert texts and all("weather".startswith(text) for text in texts), texts


def test_a_schema_the_engine_cannot_compile_is_reported_not_raised(vocabulary):
    odd = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}]
    error = vocabulary.grammars.error(hermes_call_grammar(odd, vocabulary.closer))
    assert error and "look-around" in error and "\n" not in error
    assert vocabulary.grammars.error(hermes_call_grammar(TOOLS, vocabulary.closer)) is None



# What the openai SDK's pydantic_function_tool writes for a model with a nested model and an enum: both
# in "$defs", referred to from the parameters' own root -- and a recursive "#" for good measure.
NESTED = [{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
    "$defs": {"Units": {"enum": ["c", "f"], "type": "string"},
              "Where": {"type": "object", "additionalProperties": False, "required": ["city"],
                        "properties": {"city": {"type": "string"}}}},
    "type": "object", "additionalProperties": False, "required": ["where", "units"],
    "properties": {"where": {"$ref": "#/$defs/Where"}, "units": {"$ref": "#/$defs/Units"},
                   "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}], "default": None}}}}}]
# Property and definition names that are also keywords, and parameters with an $id of their own.
KEYWORD_NAMES = [{"type": "function", "function": {"name": "set_default", "parameters": {
    "$defs": {"const": {"enum": ["c", "f"]}}, "type": "object", "required": ["default"],
    "properties": {"default": {"$ref": "#/$defs/const"}}}}},
    {"type": "function", "function": {"name": "with_id", "parameters": {
        "$id": "https://example.com/with_id", "$defs": {"U": {"enum": ["c", "f"]}}, "type": "object",
        "properties": {"u": {"$ref": "#/$defs/U"}}}}}]


def test_parameters_with_defs_and_references_compile_and_constrain_inside_the_call(tokenizer, vocabulary):
    for tools in (NESTED, NESTED + TOOLS, TOOLS + NESTED, KEYWORD_NAMES + NESTED):  # places among the alternatives
        assert vocabulary.grammars.error(hermes_call_grammar(tools, vocabulary.closer)) is None
    grammar = _grammar(vocabulary, TOOLS + NESTED)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "get_weather", "arguments": {"where": {"city": "Oslo"}, "units": "'))
    texts = {tokenizer.decode([t]) for t in _allowed(grammar)}
    assert texts and all(text[:1] in "cf" for text in texts), texts  # the enum behind "#/$defs/Units"
    _feed(grammar, _ids(tokenizer, 'c", "next": {"where": {"city": "Lima"}, "units": "f", "next": null}}}\n'))
    assert vocabulary.closer in _allowed(grammar)

    named = _grammar(vocabulary, KEYWORD_NAMES)
    named.accept(vocabulary.opener)
    _feed(named, _ids(tokenizer, '\n{"name": "set_default", "arguments": {"default": "'))
    texts = {tokenizer.decode([t]) for t in _allowed(named)}
    assert texts and all(text[:1] in "cf" for text in texts), texts


def test_only_known_formats_with_single_token_markers_get_a_grammar(tokenizer):
    encode = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    readable = grammar_vocabulary(tokenizer, len(tokenizer), [2])
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")
    assert call_grammar_vocabulary(readable, None, opener, encode) is None
    assert call_grammar_vocabulary(None, "hermes", opener, encode) is None
    assert call_grammar_vocabulary(readable, "hermes", None, encode) is None  # the opener is not one token
    split = lambda t: [1, 2] if t == "</tool_call>" else encode(t)  # noqa: E731
    assert call_grammar_vocabulary(readable, "hermes", opener, split) is None


def test_a_tokenizer_with_ids_past_the_models_row_still_gets_grammars(tokenizer):
    # Gemma 3's tokenizer has an id at its config's vocab_size: the mask covers it, the sampler trims it.
    grammars = grammar_vocabulary(tokenizer, len(tokenizer) - 5, [2])
    assert grammars is not None and grammars.tokenizer.vocab_size >= len(tokenizer)


def test_the_end_of_turn_is_the_tokenizers_own_eos_when_the_engine_stops_on_it(tokenizer):
    own = tokenizer.eos_token_id
    assert grammar_vocabulary(tokenizer, len(tokenizer), [7, own]).end_of_turn == own
    assert grammar_vocabulary(tokenizer, len(tokenizer), [7, 8]).end_of_turn == 7


@pytest.fixture(scope="module")
def mistral_tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint("mistral"))


def _mistral_vocabulary(tokenizer):
    encode = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    found = call_grammar_vocabulary(grammars, "mistral", tokenizer.convert_tokens_to_ids("[TOOL_CALLS]"), encode)
    assert found is not None
    return found


def test_a_mistral_list_call_fits_the_offered_tools_and_its_closing_bracket_disarms_the_grammar(mistral_tokenizer):
    vocabulary = _mistral_vocabulary(mistral_tokenizer)
    assert vocabulary.format == "mistral" and vocabulary.args is None  # no [ARGS] token: the list form
    grammar = ToolCallGrammar(call_grammar(TOOLS, vocabulary), vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(mistral_tokenizer, ' [{"name": "get_time", "arguments": {"city": "Oslo"}, "id": "a1b2c3d4e"}, '
                                           '{"name": "calculate", "arguments": {"a": 1, "op": "+", "b": 2}}]'))
    assert not grammar.armed


def test_with_parallel_tool_calls_false_a_mistral_list_holds_one_call(mistral_tokenizer):
    vocabulary = _mistral_vocabulary(mistral_tokenizer)
    grammar = ToolCallGrammar(call_grammar(TOOLS, vocabulary, single=True), vocabulary, single=True)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(mistral_tokenizer, '[{"name": "get_time", "arguments": {"city": "Oslo"}}'))
    assert _ids(mistral_tokenizer, ",")[0] not in _allowed(grammar)
    _feed(grammar, _ids(mistral_tokenizer, "]"))
    assert grammar.forced_token() == vocabulary.grammars.end_of_turn


def test_a_mistral_list_call_cannot_name_a_tool_that_was_not_offered(mistral_tokenizer):
    vocabulary = _mistral_vocabulary(mistral_tokenizer)
    grammar = ToolCallGrammar(call_grammar(TOOLS, vocabulary), vocabulary)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(mistral_tokenizer, '[{"name": "'))
    texts = {mistral_tokenizer.decode([t]) for t in _allowed(grammar)}
    names = [tool["function"]["name"] for tool in TOOLS]
    assert texts and all(any(name.startswith(text) for name in names) for text in texts), texts


def test_a_v11_mistral_call_is_an_offered_name_then_args_then_that_tools_arguments(mistral_tokenizer):
    from tokenizers import AddedToken

    v11 = AutoTokenizer.from_pretrained(mistral_tokenizer.name_or_path)
    v11.add_tokens([AddedToken("[ARGS]", special=True, normalized=False)])
    vocabulary = _mistral_vocabulary(v11)
    assert vocabulary.args == v11.convert_tokens_to_ids("[ARGS]")
    grammar = ToolCallGrammar(call_grammar(TOOLS, vocabulary), vocabulary)
    grammar.accept(vocabulary.opener)
    assert vocabulary.args not in _allowed(grammar)  # a name comes first
    _feed(grammar, _ids(v11, "get_weather") + [vocabulary.args])
    assert _ids(v11, '{"')[0] in _allowed(grammar)
    _feed(grammar, _ids(v11, '{"city": "Oslo"}'))
    assert not grammar.armed  # the arguments' last brace ends the call; the next [TOOL_CALLS] opens another


def test_a_v11_call_the_grammar_accepts_reads_back_as_that_call_whatever_the_names_characters(mistral_tokenizer):
    from tokenizers import AddedToken

    from server.output import get_tool_parser

    v11 = AutoTokenizer.from_pretrained(mistral_tokenizer.name_or_path)
    v11.add_tokens([AddedToken("[ARGS]", special=True, normalized=False)])
    vocabulary = _mistral_vocabulary(v11)
    odd = [{"type": "function", "function": {"name": "ns:get.weather-2", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    grammar = ToolCallGrammar(call_grammar(odd, vocabulary), vocabulary)
    written = [vocabulary.opener] + _ids(v11, "ns:get.weather-2") + [vocabulary.args] + _ids(v11, '{"city": "Oslo"}')
    grammar.accept(written[0])
    _feed(grammar, written[1:])
    assert not grammar.armed
    content, calls = get_tool_parser("mistral").parse(v11.decode(written))
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("ns:get.weather-2",
                                                                                    {"city": "Oslo"})]


def test_a_named_tool_choice_on_a_v11_mistral_tokenizer_forces_the_name_then_args(mistral_tokenizer):
    from types import SimpleNamespace

    from tokenizers import AddedToken

    from server.engine_params import _forced_tool_call
    from server.protocol.chat import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                "tools": TOOLS, "tool_choice": {"type": "function",
                                                                                "function": {"name": "get_time"}}})
    def info(tokenizer):  # as server/runtime.py finds it at load
        return SimpleNamespace(family=SimpleNamespace(tool_call_format="mistral"), reasoning=None,
                               mistral_args=mistral_args_token(lambda t: tokenizer.encode(t, add_special_tokens=False)))

    list_form = SimpleNamespace(info=info(mistral_tokenizer), tokenizer=mistral_tokenizer)
    assert list_form.info.mistral_args is None
    forced, _, _ = _forced_tool_call(req, list_form, reasoning_open=False)
    assert mistral_tokenizer.decode(forced).startswith('[TOOL_CALLS][{"name": "get_time", "arguments": ')
    v11 = AutoTokenizer.from_pretrained(mistral_tokenizer.name_or_path)
    v11.add_tokens([AddedToken("[ARGS]", special=True, normalized=False)])
    forced, _, _ = _forced_tool_call(req, SimpleNamespace(info=info(v11), tokenizer=v11), reasoning_open=False)
    assert v11.decode(forced) == "[TOOL_CALLS]get_time[ARGS]"


def _json_turn(tokenizer, vocabulary, single=False):
    from models.response_format_grammar import ResponseGrammar, TurnCalls, response_grammar
    from models.tool_call_grammar import call_blocks

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    text = response_grammar(schema, None, False, TurnCalls(call_blocks(TOOLS, vocabulary, single), single=single))
    return ResponseGrammar(text, vocabulary.grammars)


def test_a_json_answer_turn_on_a_mistral_checkpoint_may_call_in_its_list_form(mistral_tokenizer):
    vocabulary = _mistral_vocabulary(mistral_tokenizer)
    turn = _json_turn(mistral_tokenizer, vocabulary)
    _feed(turn, [vocabulary.opener] + _ids(mistral_tokenizer, ' [{"name": "get_time", "arguments": {"city": "Oslo"}}, '
                                                              '{"name": "get_weather", "arguments": {"city": "Lima"}}]'))
    assert turn.allowed_tokens() is None and turn.forced_token() == vocabulary.grammars.end_of_turn
    single = _json_turn(mistral_tokenizer, vocabulary, single=True)
    _feed(single, [vocabulary.opener] + _ids(mistral_tokenizer, '[{"name": "get_time", "arguments": {"city": "Oslo"}}'))
    assert _ids(mistral_tokenizer, ",")[0] not in _allowed(single)


def test_a_json_answer_turn_on_a_v11_mistral_checkpoint_calls_name_args_blocks_back_to_back(mistral_tokenizer):
    from tokenizers import AddedToken

    v11 = AutoTokenizer.from_pretrained(mistral_tokenizer.name_or_path)
    v11.add_tokens([AddedToken("[ARGS]", special=True, normalized=False)])
    vocabulary = _mistral_vocabulary(v11)
    turn = _json_turn(v11, vocabulary)
    block = [vocabulary.opener] + _ids(v11, "get_time") + [vocabulary.args] + _ids(v11, '{"city": "Oslo"}')
    _feed(turn, block)
    assert vocabulary.opener in _allowed(turn)  # a parallel call may follow
    _feed(turn, block)
    assert _ids(v11, "Sure")[0] not in _allowed(turn)  # no prose after calls
    answer = _json_turn(v11, vocabulary)
    _feed(answer, _ids(v11, '{"n": 3}'))
    assert answer.forced_token() == vocabulary.grammars.end_of_turn


@pytest.fixture(scope="module")
def llama_tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint("llama3"))


def _llama_vocabulary(tokenizer, opener: bool = True):
    encode = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
    grammars = grammar_vocabulary(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    tag = tokenizer.convert_tokens_to_ids("<|python_tag|>") if opener else None
    return call_grammar_vocabulary(grammars, "llama3_json", tag, encode)


def _llama_grammar(tokenizer, single: bool = False, opener: bool = True) -> ToolCallGrammar:
    vocabulary = _llama_vocabulary(tokenizer, opener)
    return ToolCallGrammar(call_grammar(TOOLS, vocabulary, single), vocabulary, single)


def test_a_llama_checkpoint_gets_a_call_grammar_even_without_a_python_tag_token(llama_tokenizer):
    with_tag, bare = _llama_vocabulary(llama_tokenizer), _llama_vocabulary(llama_tokenizer, opener=False)
    assert with_tag.format == bare.format == "llama3_json" and bare.opener is None
    assert with_tag.ends == tuple(llama_tokenizer.convert_tokens_to_ids(t) for t in ("<|eom_id|>", "<|eot_id|>"))


def test_a_bare_llama_call_arms_the_grammar_once_the_message_opens_like_a_call(llama_tokenizer):
    grammar = _llama_grammar(llama_tokenizer, opener=False)
    head = _ids(llama_tokenizer, '\n{"name": "')
    for token in head:
        assert grammar.allowed_tokens() is None
        grammar.accept(token)
    assert grammar.armed  # the whitespace and the trigger were replayed into the grammar
    allowed = _allowed(grammar)
    assert _ids(llama_tokenizer, "get")[0] in allowed and _ids(llama_tokenizer, "Oslo")[0] not in allowed
    eom = llama_tokenizer.convert_tokens_to_ids("<|eom_id|>")
    _feed(grammar, _ids(llama_tokenizer, 'get_time", "parameters": {"city": "Oslo"}}; {"name": "calculate", '
                                         '"parameters": {"a": 1, "op": "+", "b": 2}}') + [eom])
    assert not grammar.armed and grammar.allowed_tokens() is None


def test_a_llama_message_that_opens_as_prose_or_as_other_json_is_never_constrained(llama_tokenizer):
    for text in ('Sure. {"name": "get_time", "parameters": {"city": "Oslo"}}', '{"city": "Oslo", "name": "x"}',
                 '{"parameters": {}, "name": "get_time"}', '{"type": "tool", "name": "get_time"}'):
        grammar = _llama_grammar(llama_tokenizer)
        for token in _ids(llama_tokenizer, text):
            grammar.accept(token)
            assert grammar.allowed_tokens() is None, text


def test_a_bare_llama_call_arms_in_any_spacing_and_after_a_leading_type_as_llama_cpp_triggers(llama_tokenizer):
    eot = llama_tokenizer.convert_tokens_to_ids("<|eot_id|>")
    for head, rest in (('{ "name" : "', 'get_time" , "parameters" : { "city" : "Oslo" } }'),
                       ('{"name":"', 'get_time","parameters":{"city":"Oslo"}}'),
                       ('{"type": "function", "name": "', 'get_time", "parameters": {"city": "Oslo"}}'),
                       ('{\n  "name": "', 'get_time",\n  "parameters": {"city": "Oslo"}\n}')):
        grammar = _llama_grammar(llama_tokenizer, opener=False)
        for token in _ids(llama_tokenizer, head):
            assert grammar.allowed_tokens() is None, head
            grammar.accept(token)
        assert grammar.armed, head
        assert _ids(llama_tokenizer, "Oslo")[0] not in _allowed(grammar)  # only an offered tool's name
        _feed(grammar, _ids(llama_tokenizer, rest) + [eot])
        assert not grammar.armed, head
    spaced = _llama_grammar(llama_tokenizer, opener=False)
    for token in _ids(llama_tokenizer, '{"name": "get_time",'):
        spaced.accept(token)
    wide = _ids(llama_tokenizer, " " * 30)[0]
    assert llama_tokenizer.decode([wide]).count(" ") > 1 and wide not in _allowed(spaced)  # spacing stays bounded


def test_after_the_python_tag_a_llama_call_must_fit_and_a_single_one_allows_no_second(llama_tokenizer):
    tag = llama_tokenizer.convert_tokens_to_ids("<|python_tag|>")
    call = _ids(llama_tokenizer, '{"name": "get_weather", "parameters": {"city": "Lima"}}')
    parallel = _llama_grammar(llama_tokenizer)
    parallel.accept(tag)
    _feed(parallel, call)
    assert _ids(llama_tokenizer, "; ")[0] in _allowed(parallel)
    single = _llama_grammar(llama_tokenizer, single=True)
    single.accept(tag)
    _feed(single, call)
    allowed = _allowed(single)
    assert _ids(llama_tokenizer, "; ")[0] not in allowed
    assert allowed == set(_llama_vocabulary(llama_tokenizer).ends)  # only the message's end may follow
    unknown = _llama_grammar(llama_tokenizer)
    unknown.accept(tag)
    _feed(unknown, _ids(llama_tokenizer, '{"name": "'))
    assert _ids(llama_tokenizer, "Oslo")[0] not in _allowed(unknown)


def test_a_json_answer_turn_on_a_llama_checkpoint_calls_after_the_python_tag(llama_tokenizer):
    from models.response_format_grammar import TurnCalls, response_grammar

    vocabulary = _llama_vocabulary(llama_tokenizer)
    tag = llama_tokenizer.convert_tokens_to_ids("<|python_tag|>")
    turn = response_grammar({"type": "object"}, None, False, TurnCalls(call_blocks(TOOLS, vocabulary), True))
    matcher = vocabulary.grammars.compiled(turn)
    assert not matcher.is_error(), matcher.get_error()
    for token in [tag] + _ids(llama_tokenizer, '{"name": "get_time", "parameters": {"city": "Oslo"}}; '
                                               '{"name": "get_time", "parameters": {"city": "Rome"}}'):
        assert matcher.consume_token(token), llama_tokenizer.decode([token])
    assert matcher.is_accepting()
    with pytest.raises(ValueError, match="opener"):
        call_blocks(TOOLS, _llama_vocabulary(llama_tokenizer, opener=False))


def test_parameters_with_defs_compile_in_the_mistral_and_llama_call_grammars(mistral_tokenizer, llama_tokenizer):
    for vocabulary in (_mistral_vocabulary(mistral_tokenizer), _llama_vocabulary(llama_tokenizer)):
        for single in (False, True):
            assert vocabulary.grammars.error(call_grammar(TOOLS + NESTED, vocabulary, single)) is None


def test_a_nested_argument_object_takes_only_its_declared_keys_and_numbers_stop_at_sixteen_digits(tokenizer, vocabulary):
    tools = [{"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
        "where": {"type": "object", "properties": {"city": {"type": "string"}}}, "n": {"type": "integer"}}}}}]
    grammar = _grammar(vocabulary, tools)
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "book", "arguments": {"where": {"city": "Oslo"'))
    assert all(tokenizer.decode([t]).startswith("}") for t in _allowed(grammar))  # no `, "other": ...` inside

    _feed(grammar, _ids(tokenizer, '}, "n": '))
    digit = _ids(tokenizer, "4")[0]
    for _ in range(16):
        _feed(grammar, [digit])
    assert digit not in _allowed(grammar)


def test_a_number_argument_stops_at_sixteen_digits_after_its_point(tokenizer, vocabulary):
    # LangChain's with_structured_output(method="function_calling") met 0.3000... until max_tokens.
    grammar = _grammar(vocabulary)  # the demo tools: calculate's `a` and `b` are numbers
    grammar.accept(vocabulary.opener)
    _feed(grammar, _ids(tokenizer, '\n{"name": "calculate", "arguments": {"a": 0.'))
    digit = _ids(tokenizer, "3")[0]
    for _ in range(16):
        assert digit in _allowed(grammar)
        _feed(grammar, [digit])
    assert digit not in _allowed(grammar) and _ids(tokenizer, ",")[0] in _allowed(grammar)
