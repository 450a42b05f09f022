"""Through HTTP: a random-weight model's answer under response_format is JSON of the schema."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI

from live_server import live_server

# Enums and a boolean: a random model left to itself writes anything; under the grammar only these fit.
SCHEMA = {"type": "object", "required": ["room", "boost"], "additionalProperties": False,
          "properties": {"room": {"type": "string", "enum": ["kitchen", "hall"]}, "boost": {"type": "boolean"}}}


@pytest.fixture(scope="module")
def client(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as server:
        yield OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


def _ask(client, response_format, thinking: bool, seed: int, **extra):
    return client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Warm up the kitchen."}],
        response_format=response_format, temperature=1.0, seed=seed, max_tokens=120,
        extra_body={"chat_template_kwargs": {"enable_thinking": thinking}, **extra})


@pytest.mark.parametrize("seed", [1, 2])
def test_a_json_schema_answer_fits_the_schema_and_ends_the_turn(client, seed):
    reply = _ask(client, {"type": "json_schema", "json_schema": {"name": "heating", "schema": SCHEMA}}, False, seed)
    choice = reply.choices[0]
    answer = json.loads(choice.message.content)
    assert set(answer) == {"room", "boost"} and answer["room"] in ("kitchen", "hall")
    assert isinstance(answer["boost"], bool)
    assert choice.finish_reason == "stop"


def test_a_json_object_answer_is_an_object(client):
    reply = _ask(client, {"type": "json_object"}, False, 3, max_tokens=400)
    choice = reply.choices[0]
    if choice.finish_reason == "stop":  # a random model may write a long object; what it wrote must parse
        assert isinstance(json.loads(choice.message.content), dict)
    else:
        assert choice.message.content.lstrip().startswith("{")


def test_a_thought_is_cut_by_its_budget_and_the_answer_after_it_still_fits(client):
    reply = _ask(client, {"type": "json_schema", "json_schema": {"name": "heating", "schema": SCHEMA}}, True, 4,
                 reasoning_budget_tokens=5)
    choice = reply.choices[0]
    assert choice.message.model_extra.get("reasoning_content") is not None
    assert json.loads(choice.message.content)["room"] in ("kitchen", "hall")


HEATING_TOOL = [{"type": "function", "function": {"name": "set_heating", "parameters": {
    "type": "object", "required": ["room"], "properties": {"room": {"type": "string", "enum": ["kitchen", "hall"]}}}}}]


@pytest.mark.parametrize("seed", [5, 6])
def test_with_tools_a_json_answer_turn_may_call_an_offered_tool_instead(client, seed):
    # (These seeds call: the random model favours the opener. The answer branch is the next test's.)
    reply = _ask(client, {"type": "json_schema", "json_schema": {"name": "heating", "schema": SCHEMA}}, False, seed,
                 tools=HEATING_TOOL)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.function.name == "set_heating"
        assert json.loads(call.function.arguments)["room"] in ("kitchen", "hall")


def test_with_tools_offered_but_not_called_the_answer_is_still_json_of_the_schema(client, tiny_checkpoint):
    from transformers import AutoTokenizer

    opener = AutoTokenizer.from_pretrained(tiny_checkpoint("qwen3")).convert_tokens_to_ids("<tool_call>")
    reply = _ask(client, {"type": "json_schema", "json_schema": {"name": "heating", "schema": SCHEMA}}, False, 5,
                 tools=HEATING_TOOL, logit_bias={str(opener): -100})
    choice = reply.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert json.loads(choice.message.content)["room"] in ("kitchen", "hall")


def test_a_required_call_with_a_json_response_format_is_a_call_that_fits_the_tool(client):
    reply = _ask(client, {"type": "json_object"}, False, 7, tools=HEATING_TOOL, tool_choice="required")
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    assert json.loads(choice.message.tool_calls[0].function.arguments)["room"] in ("kitchen", "hall")
