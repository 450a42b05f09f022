"""Through HTTP: a random-weight model's forced tool call still fits the offered schema (the call grammar)."""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI

from live_server import live_server

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# Enums, a boolean and an integer: a random model left to itself writes anything after
# `"arguments": ` (tests/test_api_sdk.py steers one into `{}`); under the grammar only these fit.
SET_HEATING = {"type": "function", "function": {
    "name": "set_heating", "description": "Set the heating in a room",
    "parameters": {"type": "object", "required": ["room", "mode", "boost"], "properties": {
        "room": {"type": "string", "enum": ["kitchen", "hall"]},
        "mode": {"type": "string", "enum": ["eco", "comfort", "off"]},
        "boost": {"type": "boolean"}}}}}
OTHER = {"type": "function", "function": {"name": "ping", "parameters": {
    "type": "object", "properties": {"host": {"type": "string", "enum": ["a", "b"]}}, "required": ["host"]}}}


def _fits(call) -> bool:
    arguments = json.loads(call.function.arguments)
    if call.function.name == "ping":
        return arguments == {"host": arguments["host"]} and arguments["host"] in ("a", "b")
    return (call.function.name == "set_heating" and set(arguments) == {"room", "mode", "boost"}
            and arguments["room"] in ("kitchen", "hall") and arguments["mode"] in ("eco", "comfort", "off")
            and isinstance(arguments["boost"], bool))


def _finished_calls(choice) -> list:
    """The calls the model finished: at max_tokens the last one may be cut (returned as far as it got)."""
    calls = choice.message.tool_calls or []
    if choice.finish_reason == "length" and calls:
        try:
            json.loads(calls[-1].function.arguments)
        except json.JSONDecodeError:
            return calls[:-1]
    return calls


def _ask(client, **request):
    """The first choice of a "Warm up the kitchen." request offering both tools (temperature 1, 80 tokens)."""
    request = {"tools": [SET_HEATING, OTHER], "temperature": 1.0, "max_tokens": 80, **request}
    return client.chat.completions.create(model=client.models.list().data[0].id,
                                          messages=[{"role": "user", "content": "Warm up the kitchen."}],
                                          **request).choices[0]


def _served(model_dir, **settings):
    with live_server(model_dir, **settings) as server:
        yield OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def client(tiny_checkpoint):
    yield from _served(tiny_checkpoint("qwen3"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_models_required_call_parses_and_fits_one_offered_schema(client, seed):
    choice = _ask(client, tool_choice="required", seed=seed, extra_body=NO_THINKING)
    # What the random model writes after `</tool_call>` is free text (the grammar is lazy): the call is the claim.
    assert _finished_calls(choice) and all(_fits(call) for call in _finished_calls(choice)), choice


def test_a_named_tool_choice_gets_that_tools_schema(client):
    choice = _ask(client, tool_choice={"type": "function", "function": {"name": "ping"}}, seed=4,
                  extra_body=NO_THINKING)
    # A random model may call the named tool more than once (parallel calls are allowed); every call it
    # finished is that tool's, and fits its schema.
    calls = _finished_calls(choice)
    assert calls and all(call.function.name == "ping" and _fits(call) for call in calls), choice


# A valid schema the grammar engine cannot compile ("not" is outside what llguidance reads).
UNREADABLE = {"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "properties": {
    "x": {"not": {"type": "string"}}}}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "odd"}}])
def test_a_forced_call_to_a_tool_the_grammar_cannot_compile_is_refused_naming_it(client, choice):
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(client, tools=[SET_HEATING, UNREADABLE], tool_choice=choice)
    error = caught.value.body
    assert error["param"] == "tools.1.function.parameters" and "tool_choice" in error["message"], error


def test_under_auto_a_tool_the_grammar_cannot_compile_leaves_the_calls_unconstrained(client):
    # The model's choice to call is its own: the turn runs, as it did before grammars.
    assert _ask(client, tools=[SET_HEATING, UNREADABLE], max_tokens=4).finish_reason in ("length", "stop")


@pytest.fixture(scope="module")
def mistral_client(tiny_checkpoint):
    yield from _served(tiny_checkpoint("mistral"))


@pytest.mark.parametrize("seed", [1, 2])
def test_a_random_mistral_models_required_call_fits_an_offered_schema_too(mistral_client, seed):
    choice = _ask(mistral_client, tool_choice="required", seed=seed)
    assert _finished_calls(choice) and all(_fits(call) for call in _finished_calls(choice)), choice


def test_with_parallel_tool_calls_false_the_turn_ends_with_its_first_call(client, tiny_checkpoint):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3"))
    closer, end = tokenizer.convert_tokens_to_ids("</tool_call>"), tokenizer.convert_tokens_to_ids("<|im_end|>")

    def ask(**extra):
        return _ask(client, tool_choice="required", seed=5, extra_body={**NO_THINKING, "return_token_ids": True},
                    **extra)

    single = ask(parallel_tool_calls=False)
    ids = single.model_extra["token_ids"]
    assert ids[-2:] == [closer, end] and ids.count(closer) == 1, tokenizer.decode(ids)
    [call] = single.message.tool_calls
    assert _fits(call) and single.finish_reason == "tool_calls"
    free = ask()  # the same draw without the limit: the random model writes on after its call
    assert free.model_extra["token_ids"][: len(ids) - 1] == ids[:-1]
    assert len(free.model_extra["token_ids"]) > len(ids)


def test_a_json_response_format_with_tools_on_a_mistral_model_calls_in_mistrals_form(mistral_client):
    choice = _ask(mistral_client, tool_choice="required", response_format={"type": "json_object"}, seed=3,
                  max_tokens=120)
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    assert all(_fits(call) for call in _finished_calls(choice)), choice


@pytest.fixture(scope="module")
def llama_client(tiny_checkpoint):
    # Llama 3.1's template writes the tools into the user turn, indented: a longer prompt than the others.
    yield from _served(tiny_checkpoint("llama3"), max_model_len=1536)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_random_llama_models_required_call_fits_an_offered_schema_too(llama_client, seed):
    # tool_choice "required" forces the bare call's opening, `{"name": "`: the trigger that arms the grammar.
    choice = _ask(llama_client, tool_choice="required", seed=seed)
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    assert all(_fits(call) for call in _finished_calls(choice)), choice


def test_a_llama_call_with_parallel_tool_calls_false_ends_the_message(llama_client):
    choice = _ask(llama_client, tool_choice="required", seed=3, parallel_tool_calls=False)
    [call] = choice.message.tool_calls
    assert _fits(call) and choice.finish_reason == "tool_calls" and not choice.message.content, choice


def test_a_json_response_format_with_tools_on_a_llama_model_calls_after_its_python_tag(llama_client):
    choice = _ask(llama_client, tool_choice="required", response_format={"type": "json_object"}, seed=3,
                  max_tokens=120)
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    assert all(_fits(call) for call in _finished_calls(choice)), choice


def test_a_call_the_clients_stop_cuts_is_no_finished_call_whole_or_streamed(client):
    # One forced call, then the grammar ends the turn; `"mode"` is in every call to set_heating, so the
    # stop string cuts the call before its arguments close.
    request = {"tools": [SET_HEATING], "tool_choice": "required", "parallel_tool_calls": False, "seed": 1,
               "extra_body": NO_THINKING}
    assert _ask(client, **request).finish_reason == "tool_calls"  # ended by the model: a finished call
    whole = _ask(client, **request, stop=['"mode"'])
    assert whole.message.tool_calls and whole.finish_reason == "stop", whole
    stream = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Warm up the kitchen."}],
        temperature=1.0, max_tokens=80, stop=['"mode"'], stream=True, **request)
    assert [c.choices[0].finish_reason for c in stream if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_tool_choice_none_bans_the_call_opener_so_no_call_markup_reaches_the_content(client, tiny_checkpoint):
    from transformers import AutoTokenizer

    opener = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3")).convert_tokens_to_ids("<tool_call>")
    pull = {"logit_bias": {str(opener): 100}, "max_tokens": 6, "temperature": 0,
            "extra_body": {**NO_THINKING, "return_token_ids": True}}
    pulled = _ask(client, **pull)
    assert pulled.model_extra["token_ids"][0] == opener, "the bias alone opens a call"
    none = _ask(client, tool_choice="none", **pull)
    assert opener not in none.model_extra["token_ids"], none
    assert "<tool_call>" not in (none.message.content or "") and not none.message.tool_calls
