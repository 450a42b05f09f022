"""OpenAI's Responses API (`/v1/responses`) with the official SDK, over the chat pipeline.

A turn renders to the prompt the equivalent chat request renders (instructions
as the system message, flat tools as chat tools); a forced call comes back as
a `function_call` item with JSON arguments; sending the output items back with
the call's result makes the next turn, whose prompt starts with the tokens the
first one ran (the prefix cache reuses them); a cut turn is `incomplete`; a
streamed turn passes the SDK's own event checks and ends as the whole one;
and what this server does not do (conversation objects, non-function tools)
is refused naming the field. Stored turns: tests/test_api_responses_store.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from engine_samplers import PoisonedSampler, swapped
from live_server import live_server

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city.", "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Lima", "Oslo"]}},
                         "required": ["city"]}}]  # an enum: the grammar ends the random model's call quickly
# What the model reads: `strict` is an instruction to the API (the call grammar holds every call to its schema).
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k not in ("type", "strict")}} for t in TOOLS]


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def _forced_call(client, model):
    return client.responses.create(model=model, instructions="You check the weather.",
                                   input="What is the weather in Lima?", tools=TOOLS, tool_choice="required",
                                   parallel_tool_calls=False,  # the grammar ends the turn after the call
                                   max_output_tokens=200, temperature=0,
                                   extra_body={"reasoning_budget_tokens": 8})


def test_a_forced_call_comes_back_as_a_function_call_item_of_the_prompt_chat_would_run(client, model, server):
    r = _forced_call(client, model)
    assert r.status == "completed" and r.object == "response"
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    assert isinstance(json.loads(calls[0].arguments)["city"], str), "the call grammar keeps the arguments valid"
    chat = {"messages": [{"role": "system", "content": "You check the weather."},
                         {"role": "user", "content": "What is the weather in Lima?"}], "tools": CHAT_TOOLS}
    rendered = httpx.post(server.base_url + "/tokenize", json=chat, timeout=60).json()
    assert r.usage.input_tokens == rendered["count"], "the same prompt as the chat request it spells"
    assert r.usage.output_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    thought = [item for item in r.output if item.type == "reasoning"]
    assert thought and thought[0].content[0].text, "the thought comes back as reasoning_text"
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens


def test_output_items_sent_back_with_the_result_make_a_next_turn_that_reuses_the_first(client, model, server):
    first = _forced_call(client, model)
    [call] = [item for item in first.output if item.type == "function_call"]
    history = [{"role": "user", "content": "What is the weather in Lima?"},
               *[item.model_dump(exclude_none=True) for item in first.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 19}'}]
    second = client.responses.create(model=model, instructions="You check the weather.", input=history, tools=TOOLS,
                                      max_output_tokens=4, temperature=0)
    assert second.status in ("completed", "incomplete")
    assert second.usage.input_tokens > first.usage.input_tokens
    # The first turn's prompt is reused whole (to its last full page of 16). The random model's thought
    # need not re-tokenize alike when replayed; the demo model's does (the next test).
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 16 * 16


def _as_codex_sends_it(item: dict) -> dict:
    """An output item as Codex sends it back: a reasoning item without its reasoning_text content."""
    return {k: v for k, v in item.items() if k != "content"} if item["type"] == "reasoning" else item


@pytest.mark.parametrize("carried", [False, True], ids=["thought-kept-as-content", "thought-only-in-encrypted-content"])
def test_the_demo_models_thought_and_call_sent_back_as_items_are_reused_by_the_next_turn(carried):
    """With a model whose output re-renders as it was generated, the next turn reuses the first turn's
    prompt, thought and call: the reasoning item is replayed as the thought it was -- also when a client
    that keeps no state (store false) sends it back with only the encrypted_content it asked for."""
    demo_tools = json.loads((ROOT / "configs" / "demo_tools.json").read_text())
    flat = [{"type": "function", **t["function"]} for t in demo_tools]
    extra = dict(store=False, include=["reasoning.encrypted_content"]) if carried else {}
    with live_server(ROOT / "models" / "demo" / "checkpoint", page_size=4, max_model_len=2048,
                     kv_cache_tokens=8192, served_model_name="demo") as demo:
        client = openai.OpenAI(base_url=demo.v1, api_key="unused", max_retries=0, timeout=120)
        first = client.responses.create(model="demo", input="What is 12 + 30?", tools=flat, temperature=0,
                                        max_output_tokens=300, **extra)
        calls = [item for item in first.output if item.type == "function_call"]
        assert first.status == "completed" and calls, first.output
        sent_back = [item.model_dump(exclude_none=True) for item in first.output]
        if carried:
            assert all(i["encrypted_content"] for i in sent_back if i["type"] == "reasoning")
            sent_back = [_as_codex_sends_it(item) for item in sent_back]
        else:
            assert all("encrypted_content" not in i for i in sent_back), "only when asked"
        history = [{"role": "user", "content": "What is 12 + 30?"}, *sent_back,
                   *[{"type": "function_call_output", "call_id": c.call_id, "output": '{"result": 42}'}
                     for c in calls]]
        second = client.responses.create(model="demo", input=history, tools=flat, temperature=0,
                                         max_output_tokens=300, **extra)
    reused = second.usage.input_tokens_details.cached_tokens
    thought = first.usage.output_tokens_details.reasoning_tokens
    assert thought > 0 and reused >= first.usage.input_tokens + thought - 4, (reused, first.usage)


def test_a_thought_that_led_to_nothing_is_replayed_as_an_assistant_turn_of_its_own(client, model, server):
    thought = {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Cut short"}]}
    r = client.responses.create(model=model, input=[{"role": "user", "content": "Think."}, thought,
                                                    {"role": "user", "content": "Go on."}],
                                max_output_tokens=2, temperature=0)
    assert r.status in ("completed", "incomplete")
    chat = {"messages": [{"role": "user", "content": "Think."},
                         {"role": "assistant", "content": "", "reasoning_content": "Cut short"},
                         {"role": "user", "content": "Go on."}]}
    assert r.usage.input_tokens == httpx.post(server.base_url + "/tokenize", json=chat, timeout=60).json()["count"]
    alone = httpx.post(server.v1 + "/responses", json={"input": [thought], "max_output_tokens": 2}, timeout=60)
    assert alone.status_code == 200, alone.text


def test_a_turn_cut_by_max_output_tokens_is_incomplete(client, model):
    r = client.responses.create(model=model, input="Tell me a long story.", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


@pytest.mark.parametrize("body, param", [
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"input": [{"type": "computer_call"}]}, "input.0.type"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "", "arguments": "{}"}]}, "input.0.name"),
    ({"input": [{"type": "function_call_output", "call_id": "", "output": "1"}]}, "input.0.call_id"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0.type"),
    ({"input": []}, "input"),
    # OpenAI's fields this server checks and then leaves unused keep their types:
    ({"input": "hi", "top_logprobs": 21}, "top_logprobs"),
    ({"input": "hi", "truncation": "sometimes"}, "truncation"),
    ({"input": "hi", "include": "reasoning.encrypted_content"}, "include"),
    ({"input": "hi", "service_tier": "fast"}, "service_tier"),
    ({"input": "hi", "user": 7}, "user"),
    ({"input": "hi", "client_metadata": ["i7"]}, "client_metadata"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "anchorage.thought.v1.AAAA"}]},
     "input.0.encrypted_content"),
    # Found by the chat pipeline the turn becomes, named as the client wrote it:
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "word " * 600}, "input"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}},
     "text.format.schema"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "g"}}, "tool_choice.name"),
])
def test_what_this_server_does_not_do_is_a_400_naming_the_field(server, body, param):
    r = httpx.post(server.v1 + "/responses", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_openais_identifiers_and_hints_are_accepted_and_change_no_answer(client, model):
    ask = dict(model=model, input="What is the weather in Lima?", max_output_tokens=8, temperature=0)
    hinted = client.responses.create(**ask, user="u7", safety_identifier="u7", prompt_cache_key="agent-7",
                                     service_tier="auto", include=["reasoning.encrypted_content"],
                                     truncation="disabled", top_logprobs=0,
                                     extra_body={"client_metadata": {"x-codex-installation-id": "i7"}})
    assert hinted.output_text == client.responses.create(**ask).output_text
    assert (hinted.user, hinted.safety_identifier, hinted.prompt_cache_key, hinted.top_logprobs) == (
        "u7", "u7", "agent-7", 0), "the client's labels echoed, as OpenAI echoes them"


def test_a_streamed_turn_sends_each_item_added_filled_and_done_and_ends_as_the_whole_one(client, model):
    args = dict(model=model, instructions="You check the weather.", input="What is the weather in Lima?",
                tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_output_tokens=200, temperature=0,
                extra_body={"reasoning_budget_tokens": 8})
    whole = client.responses.create(**args)
    with client.responses.stream(**args) as stream:  # the SDK's accumulator checks the event order
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [i.type for i in final.output] == [i.type for i in whole.output]
    for got, want in zip(final.output, whole.output):
        if got.type == "function_call":
            assert (got.name, got.arguments) == (want.name, want.arguments)
        else:
            assert got.content[0].text == want.content[0].text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.output_tokens_details.reasoning_tokens == whole.usage.output_tokens_details.reasoning_tokens
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    done = [e.item.type for e in events if e.type == "response.output_item.done"]
    assert added == done == [i.type for i in final.output]


def test_a_streamed_turn_cut_by_max_output_tokens_ends_incomplete(client, model):
    events = list(client.responses.create(model=model, input="Tell me a long story.", max_output_tokens=3,
                                          temperature=0, stream=True))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 3


def test_a_streamed_turn_that_fails_midway_ends_with_an_error_event(server, model):
    with swapped(server.state.engine, lambda real: PoisonedSampler(real, poison=0.321, allowed=2)):
        r = httpx.post(server.v1 + "/responses", timeout=120, json={
            "model": model, "input": "Tell me a story.", "max_output_tokens": 12, "stream": True,
            "temperature": 0.321})
    assert r.status_code == 200  # the headers went out with the first event
    events = [json.loads(line[len("data: "):]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "error"
    assert "sampling" in events[-1]["message"]


def test_a_json_schema_text_format_holds_the_answer_to_the_schema(client, model):
    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Lima", "Oslo"]}},
              "required": ["city"], "additionalProperties": False}
    r = client.responses.create(model=model, input="Which city?", temperature=0, max_output_tokens=60,
                                text={"format": {"type": "json_schema", "name": "pick", "schema": schema}},
                                extra_body={"reasoning_budget_tokens": 4})
    [message] = [item for item in r.output if item.type == "message"]
    assert json.loads(message.content[0].text)["city"] in ("Lima", "Oslo")
    assert r.text.format.type == "json_schema"


def _items(response) -> list[tuple]:
    return [(i.type, getattr(i, "status", None),
             i.arguments if i.type == "function_call" else i.content[0].text) for i in response.output]


@pytest.mark.parametrize("extra", [
    {"tool_choice": "required", "max_output_tokens": 200},  # calls, and whatever the random model writes after
    {"max_output_tokens": 60},  # cut: text, maybe calls, maybe text again
])
def test_whole_and_streamed_turns_agree_item_for_item_in_order_and_status(client, model, extra):
    two = TOOLS + [{**TOOLS[0], "name": "get_time", "description": "Local time in a city."}]
    args = dict(model=model, input="What is the weather in Lima?", tools=two, temperature=0,
                extra_body={"reasoning_budget_tokens": 8}, **extra)
    whole = client.responses.create(**args)
    last = list(client.responses.create(stream=True, **args))[-1]  # completed or incomplete: the final response
    assert last.type == f"response.{whole.status}"
    assert _items(last.response) == _items(whole)


_LOOK_AROUND = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}, "required": ["a"]}


@pytest.mark.parametrize("path, body, param", [
    ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
                           "tools": [{"type": "function", "function": {"name": "f", "parameters": _LOOK_AROUND}}]},
     "tools.0.function.parameters"),
    ("/responses", {"input": "hi", "tool_choice": "required",
                    "tools": [{"type": "function", "name": "f", "parameters": _LOOK_AROUND}]},
     "tools.0.parameters"),
])
def test_a_forced_call_to_a_tool_the_grammar_cannot_enforce_names_the_field_as_the_client_wrote_it(
        server, path, body, param):
    r = httpx.post(server.v1 + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(f"{param} cannot be enforced"), err


def test_output_items_dumped_whole_by_the_sdks_types_are_accepted_back_nulls_and_all(client, model):
    # model_dump() keeps every field the SDK's types define (a call's async/caller/namespace, a
    # message's phase), null where this server set none: sent back, they change nothing.
    first = _forced_call(client, model)
    [call] = [item for item in first.output if item.type == "function_call"]
    dumped = [item.model_dump(by_alias=True) for item in first.output]
    assert any(set(item) >= {"async", "caller", "namespace"} for item in dumped)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "19", "name": None}
    said = {"type": "message", "role": "assistant", "phase": "final_answer",
            "content": [{"type": "output_text", "text": "Noted.", "annotations": []}]}
    turns = [[{"role": "user", "content": "What is the weather in Lima?"}, *dumped, result],
             [{"role": "user", "content": "hi"}, said, {"role": "user", "content": "ok"}]]
    for items in turns:
        r = client.responses.create(model=model, input=items, tools=TOOLS, max_output_tokens=2, temperature=0)
        assert r.status in ("completed", "incomplete")


def test_an_error_names_every_field_as_responses_spells_it(server):
    # A tool the grammar cannot enforce beside a JSON text format: the check names both fields.
    body = {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "tools": [{"type": "function", "name": "f", "parameters": _LOOK_AROUND}]}
    r = httpx.post(server.v1 + "/responses", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools.0.parameters" and "text.format" in err["message"], err
    assert "response_format" not in err["message"] and "function.parameters" not in err["message"], err


def test_a_wrong_method_on_a_stored_response_lists_both_methods_it_takes(server):
    # FastAPI keeps an included router's routes behind one route: the Allow list asks each route.
    r = httpx.put(server.base_url + "/v1/responses/resp_x", timeout=30)
    assert r.status_code == 405
    assert r.headers["allow"] == "DELETE, GET"
    assert r.json()["error"]["message"].endswith("(allowed: DELETE, GET)")


def _text_part(response):
    [message] = [item for item in response.output if item.type == "message"]
    return message.content[0]


def test_another_providers_encrypted_reasoning_is_read_as_no_thought(client, model, server):
    foreign = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABpQ0t4-not-ours"}
    r = client.responses.create(model=model, input=[{"role": "user", "content": "Think."}, foreign,
                                                    {"role": "user", "content": "Go on."}],
                                max_output_tokens=2, temperature=0)
    chat = {"messages": [{"role": "user", "content": "Think."}, {"role": "assistant", "content": "",
                                                                  "reasoning_content": ""},
                         {"role": "user", "content": "Go on."}]}
    assert r.usage.input_tokens == httpx.post(server.base_url + "/tokenize", json=chat, timeout=60).json()["count"]


def _same_logprobs(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return len(a) == len(b) and all(x == y and abs(p - q) < 1e-4 for (x, p), (y, q) in zip(a, b))


def test_output_text_logprobs_are_those_of_the_tokens_that_wrote_the_text_not_of_the_thought(client, model, server):
    ask = dict(input="Say something.", max_output_tokens=24, temperature=0, extra_body={"reasoning_budget_tokens": 4})
    r = client.responses.create(model=model, **ask, include=["message.output_text.logprobs"], top_logprobs=2)
    part = _text_part(r)
    assert part.text and "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 and lp.top_logprobs[0].logprob >= lp.logprob for lp in part.logprobs)
    assert len(part.logprobs) < r.usage.output_tokens  # the thought's tokens and its closer are not the text's
    chat = httpx.post(server.v1 + "/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": "Say something."}], "max_completion_tokens": 24,
        "temperature": 0, "reasoning_budget_tokens": 4, "logprobs": True, "top_logprobs": 2}).json()
    every = [(e["token"], e["logprob"]) for e in chat["choices"][0]["logprobs"]["content"]]
    mine = [(lp.token, lp.logprob) for lp in part.logprobs]
    # One run of the turn's tokens, with their logprobs: equal up to float rounding, since the second
    # request's prompt comes partly from the prefix cache, computed in other chunks than a fresh prefill.
    assert any(_same_logprobs(every[i:i + len(mine)], mine) for i in range(len(every)))
    assert _text_part(client.responses.create(model=model, **ask)).logprobs == []  # only when asked


def test_a_streamed_text_sends_its_logprobs_with_its_deltas_and_ends_with_them_whole(client, model):
    ask = dict(model=model, input="Say something.", max_output_tokens=24, temperature=0, top_logprobs=1,
               include=["message.output_text.logprobs"], extra_body={"reasoning_budget_tokens": 4})
    whole = _text_part(client.responses.create(**ask))
    streamed, done, final = [], None, None
    with client.responses.stream(**ask) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                streamed += event.logprobs
            elif event.type == "response.output_text.done":
                done = event.logprobs
            elif event.type in ("response.completed", "response.incomplete"):  # (24 tokens may cut the text)
                final = _text_part(event.response)
    dumped = [lp.model_dump() for lp in whole.logprobs]
    assert [lp.model_dump() for lp in streamed] == [lp.model_dump() for lp in done] == dumped
    assert [lp.model_dump() for lp in final.logprobs] == dumped


def test_a_request_shaped_as_codex_sends_it_streams_to_completion_with_its_thought_carried(server, model):
    """The body Codex (codex-rs ResponsesApiRequest) posts with a custom provider: stateless (store false),
    streamed, asking for encrypted reasoning, with its own labels and a flat function tool."""
    shell = {"type": "function", "name": "shell", "description": "Runs a shell command.", "strict": False,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                            "required": ["command"], "additionalProperties": False}}
    body = {"model": model, "instructions": "You are a coding agent.",
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files."}]}],
            "tools": [shell], "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "0199a1b2-thread",
            "text": {"verbosity": "medium"}, "client_metadata": {"x-codex-installation-id": "i7"},
            "max_output_tokens": 24, "reasoning_budget_tokens": 4, "temperature": 0}  # (the test's own limits)
    with httpx.stream("POST", server.v1 + "/responses", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
    thoughts = [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"]
    assert thoughts and all(t["encrypted_content"] for t in thoughts)


def test_instructions_and_leading_developer_messages_are_one_system_turn_so_single_system_templates_take_them():
    from server.protocol.responses import ResponsesRequest

    req = ResponsesRequest.model_validate({
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "developer", "content": "Be brief."},
                  {"type": "message", "role": "user", "content": "List files."},
                  {"type": "message", "role": "developer", "content": "Later note."}]})
    messages = req.to_chat_body()["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "system"]
    assert messages[0]["content"] == "You are a coding agent.\n\nBe brief."


def test_a_stored_turns_call_must_be_answered_by_the_next_turns_input():
    from server.protocol.responses import FunctionCallItem, ResponsesRequest

    stored = [FunctionCallItem(type="function_call", call_id="call_7", name="get_weather", arguments="{}")]
    moved_on = ResponsesRequest.model_validate({"input": "never mind"})
    assert moved_on.unpaired_call(stored) == ("input", "input: no function_call_output found for function call "
                                                       "'call_7'; answer every call")
    answered = ResponsesRequest.model_validate(
        {"input": [{"type": "function_call_output", "call_id": "call_7", "output": "{}"}]})
    assert answered.unpaired_call(stored) is None
    # A call cut by max_output_tokens (stored `incomplete`) cannot be run: the conversation goes on without it.
    cut = [FunctionCallItem(type="function_call", call_id="call_8", name="get_weather", arguments='{"ci',
                            status="incomplete")]
    assert moved_on.unpaired_call(cut) is None


def test_the_sdks_input_token_count_is_the_prompt_a_turn_would_run_stored_turns_included(client, model):
    ask = dict(instructions="You check the weather.", input="What is the weather in Lima?", tools=TOOLS)
    counted = client.responses.input_tokens.count(model=model, **ask)
    assert counted.object == "response.input_tokens"
    ran = client.responses.create(model=model, max_output_tokens=4, temperature=0, **ask)
    assert counted.input_tokens == ran.usage.input_tokens
    follow_up = client.responses.input_tokens.count(model=model, previous_response_id=ran.id, input="And Quito?",
                                                    tools=TOOLS)
    ran_next = client.responses.create(model=model, previous_response_id=ran.id, input="And Quito?", tools=TOOLS,
                                       max_output_tokens=4, temperature=0)
    assert follow_up.input_tokens == ran_next.usage.input_tokens > counted.input_tokens
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.input_tokens.count(model=model, input="x", previous_response_id="resp_nope")
    assert err.value.body["param"] == "previous_response_id"
