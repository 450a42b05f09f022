"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`), driven by Anthropic's SDK.

A turn answers content blocks -- thinking, text, tool_use -- read by the same
parser as chat, so its thought and text are chat's for the same conversation;
whole and streamed answers agree block for block; the thinking budget is the
server's reasoning budget; a stop sequence, a cut, a finished call each give
their stop reason; usage splits the prompt into what the prefix cache held
and what it did not, and a tool loop that passes its blocks back reuses the
first turn's tokens. Errors are Anthropic-shaped and name the field.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from live_server import live_server
from server.protocol.messages import MessagesRequest

TOOLS = [{"name": "get_weather", "description": "Weather in a city.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Lima", "Oslo"]}},
                           "required": ["city"]}}]
ASK = [{"role": "user", "content": "What is the weather in Lima?"}]
GREEDY = {"temperature": 0}  # the SDK no longer takes sampling knobs by name; the API still does


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client, server):
    return httpx.get(f"{server.v1}/models", timeout=30).json()["data"][0]["id"]


def _chat(server, model, messages, **extra):
    r = httpx.post(f"{server.v1}/chat/completions", timeout=120,
                   json={"model": model, "messages": messages, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_a_turn_answers_chats_thought_and_text_as_blocks_with_anthropic_usage(client, model, server):
    chat = _chat(server, model, ASK, max_tokens=24, reasoning_budget_tokens=6)
    message = client.messages.create(model=model, max_tokens=24, messages=ASK, extra_body=GREEDY,
                                     thinking={"type": "enabled", "budget_tokens": 6})
    assert message.type == "message" and message.role == "assistant" and message.model == model
    assert message.id.startswith("msg_")
    thinking = [b.thinking for b in message.content if b.type == "thinking"]
    text = "".join(b.text for b in message.content if b.type == "text")
    assert thinking == [chat["message"]["reasoning_content"]] and thinking[0]
    assert text == (chat["message"]["content"] or "")
    assert message.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[chat["finish_reason"]]
    counted = client.messages.count_tokens(model=model, messages=ASK,
                                           thinking={"type": "enabled", "budget_tokens": 6}).input_tokens
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted and usage.cache_creation_input_tokens == 0
    assert usage.cache_read_input_tokens > 0  # the chat turn before it left this prompt in the prefix cache


def test_whole_and_streamed_turns_agree_block_for_block(client, model):
    ask = dict(model=model, max_tokens=40, messages=ASK, extra_body=GREEDY, tools=TOOLS,
               tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}, thinking={"type": "enabled", "budget_tokens": 8})
    whole = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [b.to_dict() for b in streamed.content] == [
        {**b.to_dict(), **({"id": s.id} if b.type == "tool_use" else {})} for b, s in zip(whole.content, streamed.content)]
    assert streamed.stop_reason == whole.stop_reason and streamed.usage.output_tokens == whole.usage.output_tokens


def test_a_forced_tool_gives_a_tool_use_block_and_a_loop_passing_it_back_reuses_the_first_turn(client, model):
    first = client.messages.create(model=model, max_tokens=60, messages=ASK, extra_body=GREEDY, tools=TOOLS,
                                   tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                   thinking={"type": "enabled", "budget_tokens": 8})
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and call.name == "get_weather" and call.input["city"] in ("Lima", "Oslo")
    assert call.id.startswith("toolu_")
    history = [*ASK, {"role": "assistant", "content": [b.to_dict() for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": '{"temperature_c": 19}'}]}]
    second = client.messages.create(model=model, max_tokens=8, messages=history, extra_body=GREEDY, tools=TOOLS,
                                    thinking={"type": "enabled", "budget_tokens": 8})
    first_prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens >= first_prompt // 16 * 16  # its whole pages (16 tokens each)


def test_thinking_disabled_writes_no_thought(client, model):
    message = client.messages.create(model=model, max_tokens=12, messages=ASK, extra_body=GREEDY,
                                     thinking={"type": "disabled"})
    assert [b.type for b in message.content if b.type == "thinking"] == []


def test_a_stop_sequence_ends_the_turn_before_it_and_is_named(client, model):
    ask = dict(model=model, max_tokens=40, messages=[{"role": "user", "content": "Write at length."}],
               extra_body=GREEDY, thinking={"type": "disabled"})
    text = "".join(b.text for b in client.messages.create(**ask).content if b.type == "text")
    assert len(text) > 12, text  # greedy on this checkpoint: text enough to cut
    stop = text[8:11]
    cut = client.messages.create(**ask, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert "".join(b.text for b in cut.content if b.type == "text") == text[:text.index(stop)]


def test_a_cut_turn_is_max_tokens_and_counts_its_tokens(client, model):
    message = client.messages.create(model=model, max_tokens=3, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "Write at length."}])
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3


def test_a_system_prompt_and_a_failed_tool_result_reach_the_prompt(client, model):
    plain = client.messages.count_tokens(model=model, messages=ASK).input_tokens
    with_system = client.messages.count_tokens(model=model, messages=ASK, system="You are terse.").input_tokens
    assert with_system > plain
    turn = [*ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                     "input": {"city": "Lima"}}]}]
    ok, failed = ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "down",
                                                "is_error": flag}]} for flag in (False, True))
    counts = [client.messages.count_tokens(model=model, messages=[*turn, result], tools=TOOLS).input_tokens
              for result in (ok, failed)]
    assert counts[1] > counts[0]  # the error is said


@pytest.mark.parametrize("body, status, kind, names", [
    ({"messages": ASK}, 400, "invalid_request_error", "max_tokens"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
     400, "invalid_request_error", "messages.0.content.0.type"),
    ({"max_tokens": 4, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     400, "invalid_request_error", "tools.0.type"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA=="}}]}]},
     400, "invalid_request_error", "messages.0.content.0.source.type"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "content", "content": [{"type": "image", "source": {}}]}}]}]},
     400, "invalid_request_error", "messages.0.content.0.source.content.0.type"),
    ({"max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a"}}]}]},
     400, "invalid_request_error", "messages.1.content.0.type"),
    ({"max_tokens": 4, "messages": ASK, "tool_choice": {"type": "tool"}}, 400, "invalid_request_error",
     "tool_choice.name"),
    ({"max_tokens": 4, "messages": ASK, "thinking": {"type": "enabled"}}, 400, "invalid_request_error",
     "thinking.budget_tokens"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                                  "input": {}}]}]},
     400, "invalid_request_error", "messages.0.content.0.type"),
    ({"max_tokens": 4, "messages": ASK, "model": "claude-nothing"}, 404, "not_found_error", "model"),
    ({"max_tokens": 4, "messages": ASK, "temperature": 1.5}, 400, "invalid_request_error", "temperature"),
    ({"max_tokens": 4, "messages": ASK, "stop_sequences": [""]}, 400, "invalid_request_error", "stop_sequences"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": ["text"], "text": "a"}]}]}, 400,
     "invalid_request_error", "messages.0.content.0.type"),  # a type that is no string (was a 500)
    ({"max_tokens": 4, "messages": [{"role": "user", "content": None}]}, 400, "invalid_request_error",
     "messages.0.content:"),  # no union member's name (`content.str`) in the path
    ({"max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": "{"}],
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, 400,
     "invalid_request_error", "output_config.format"),
    # A conversation's calls, as Anthropic checks them:
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}]},
     400, "invalid_request_error", "messages.0.content.0.tool_use_id"),
    ({"max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]}, {"role": "user", "content": "and?"}]},
     400, "invalid_request_error", "messages.2"),
    ({"max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]}]},
     400, "invalid_request_error", "messages.1.content.1.id"),
    ({"max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]}]},
     400, "invalid_request_error", "messages.1"),
])
def test_a_bad_request_is_an_anthropic_error_naming_the_field(server, body, status, kind, names):
    r = httpx.post(f"{server.base_url}/v1/messages", json=body, timeout=30)
    assert r.status_code == status, r.text
    got = r.json()
    assert got["type"] == "error" and got["error"]["type"] == kind and names in got["error"]["message"], got


def test_a_token_count_is_refused_as_its_turn_would_be_and_takes_no_generation_knobs(server):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    for body, names in (({"messages": [{"role": "user", "content": [image]}]}, "messages.0.content.0.type"),
                        ({"messages": ASK, "max_tokens": 4}, "max_tokens")):
        r = httpx.post(f"{server.base_url}/v1/messages/count_tokens", json=body, timeout=30)
        assert r.status_code == 400 and names in r.json()["error"]["message"], r.text


def test_malformed_json_and_unknown_routes_are_anthropic_errors_there_and_openai_errors_elsewhere(server):
    r = httpx.post(f"{server.base_url}/v1/messages", content=b"{", headers={"content-type": "application/json"},
                   timeout=30)
    assert r.status_code == 400 and r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{server.v1}/chat/completions", content=b"{", headers={"content-type": "application/json"},
                   timeout=30)
    assert r.status_code == 400 and "type" not in r.json() and r.json()["error"]["type"] == "invalid_request_error"


def test_the_sdk_raises_its_own_errors(client, model):
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=model, max_tokens=4, messages=[])
    assert "messages" in str(bad.value)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-nothing", max_tokens=4, messages=ASK)


def test_with_an_api_key_the_sdks_x_api_key_header_is_accepted_and_a_wrong_key_is_an_anthropic_401(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), api_key="sekret") as s:
        model = httpx.get(f"{s.v1}/models", timeout=30).json()["data"][0]["id"]
        ok = anthropic.Anthropic(base_url=s.base_url, api_key="sekret", max_retries=0)
        assert ok.messages.create(model=model, max_tokens=2, messages=ASK).usage.output_tokens == 2
        with pytest.raises(anthropic.AuthenticationError) as denied:
            anthropic.Anthropic(base_url=s.base_url, api_key="wrong", max_retries=0).messages.create(
                model=model, max_tokens=2, messages=ASK)
        assert denied.value.body["error"]["type"] == "authentication_error"


def test_an_output_format_holds_the_answer_to_its_schema(client, model):
    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Lima", "Oslo"]}},
              "required": ["city"], "additionalProperties": False}
    message = client.messages.create(model=model, max_tokens=60, messages=[{"role": "user", "content": "Which city?"}],
                                     thinking={"type": "enabled", "budget_tokens": 4}, extra_body=GREEDY,
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
    text = "".join(b.text for b in message.content if b.type == "text")
    assert json.loads(text)["city"] in ("Lima", "Oslo") and message.stop_reason == "end_turn"


def test_a_thought_asked_omitted_comes_as_a_block_without_its_text(client, model):
    ask = dict(model=model, max_tokens=16, messages=ASK, extra_body=GREEDY)
    shown = client.messages.create(**ask, thinking={"type": "enabled", "budget_tokens": 6})
    omitted = client.messages.create(**ask, thinking={"type": "enabled", "budget_tokens": 6, "display": "omitted"})
    assert [b.type for b in omitted.content] == [b.type for b in shown.content]
    assert [b.thinking for b in shown.content if b.type == "thinking"][0]
    assert [b.thinking for b in omitted.content if b.type == "thinking"] == [""]


def test_a_stream_splits_its_prompt_by_the_prefix_cache_from_message_start_to_its_final_usage(client, model):
    ask = dict(model=model, max_tokens=4, messages=ASK, extra_body=GREEDY)
    client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        opening = next(e for e in stream if e.type == "message_start").message.usage
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens > 0 and final.usage.output_tokens == 4
    assert (opening.input_tokens, opening.cache_read_input_tokens, opening.output_tokens) == (
        final.usage.input_tokens, final.usage.cache_read_input_tokens, 0)
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == client.messages.count_tokens(
        model=model, messages=ASK).input_tokens


def test_a_final_assistant_message_is_a_prefill_the_answer_goes_on_from(client, model, server):
    prefilled = [*ASK, {"role": "assistant", "content": "The weather in"}]
    message = client.messages.create(model=model, max_tokens=6, messages=prefilled, extra_body=GREEDY,
                                     thinking={"type": "disabled"})
    chat = _chat(server, model, prefilled, max_tokens=6, reasoning_budget_tokens=0, add_generation_prompt=False,
                 continue_final_message=True)
    assert "".join(b.text for b in message.content if b.type == "text") == (chat["message"]["content"] or "")
    assert client.messages.count_tokens(model=model, messages=prefilled).input_tokens > client.messages.count_tokens(
        model=model, messages=ASK).input_tokens


def test_an_empty_final_assistant_message_is_no_prefill_and_the_model_answers_a_fresh_turn(client, model):
    for empty in ("", []):
        ends_empty = [*ASK, {"role": "assistant", "content": empty}]
        assert client.messages.count_tokens(model=model, messages=ends_empty).input_tokens == \
            client.messages.count_tokens(model=model, messages=ASK).input_tokens
    message = client.messages.create(model=model, max_tokens=6, messages=[*ASK, {"role": "assistant", "content": ""}],
                                     extra_body=GREEDY)
    assert message.content and message.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_chat_pipeline_errors_use_anthropics_words(server):
    r = httpx.post(f"{server.base_url}/v1/messages", json={"max_tokens": 4, "messages": ASK,
                                                           "tool_choice": {"type": "any"}}, timeout=30)
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and '"any"' in message and "required" not in message, message


def test_a_prompt_over_the_context_is_refused_as_too_long_and_still_counted(client, model, server):
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=model, max_tokens=4, messages=long)
    assert refused.value.body["error"]["message"].startswith("prompt is too long: "), refused.value.body
    assert client.messages.count_tokens(model=model, messages=long).input_tokens > 512  # the test server's context


def test_a_turn_the_context_cut_before_max_tokens_says_so(client, model):
    message = client.messages.create(model=model, max_tokens=4000, messages=[{"role": "user", "content": "word " * 140}],
                                     thinking={"type": "disabled"}, extra_body=GREEDY)
    assert message.stop_reason == "model_context_window_exceeded", message.stop_reason
    assert message.usage.output_tokens < 4000


def test_a_forced_call_cut_before_its_name_is_out_answers_no_text(client, model):
    tools = [*TOOLS, {"name": "get_time", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    for cut in range(1, 16):
        ask = dict(model=model, max_tokens=cut, messages=ASK, tools=tools, tool_choice={"type": "any"},
                   thinking={"type": "disabled"}, extra_body=GREEDY)
        whole = client.messages.create(**ask)
        with client.messages.stream(**ask) as stream:
            streamed = stream.get_final_message()
        assert [b.type for b in whole.content if b.type == "text"] == [], (cut, whole.content)
        assert [b.type for b in streamed.content] == [b.type for b in whole.content]


def test_anthropic_tool_hints_are_accepted(client, model):
    tool = {**TOOLS[0], "strict": True, "eager_input_streaming": True, "defer_loading": False,
            "input_examples": [{"city": "Lima"}], "cache_control": {"type": "ephemeral"}}
    assert client.messages.count_tokens(model=model, messages=ASK, tools=[tool]).input_tokens > 0


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
def test_every_anthropic_effort_is_taken(client, model, effort):
    assert client.messages.count_tokens(model=model, messages=ASK, output_config={"effort": effort}).input_tokens > 0


def test_tool_results_reach_the_model_in_the_order_of_their_calls_whatever_order_they_come_in():
    calls = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Lima"}},
        {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Oslo"}}]}
    lima, oslo = ({"type": "tool_result", "tool_use_id": i, "content": c} for i, c in (("t1", "20C"), ("t2", "5C")))

    def results(*user_turns):
        body = MessagesRequest.model_validate({"max_tokens": 4, "messages": [*ASK, calls, *user_turns]}).to_chat_body()
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]

    in_order = [("t1", "20C"), ("t2", "5C")]
    assert results({"role": "user", "content": [lima, oslo]}) == in_order
    assert results({"role": "user", "content": [oslo, lima]}) == in_order  # templates pair them by place
    # The same turn split over two user messages is one turn (Anthropic merges consecutive roles).
    assert results({"role": "user", "content": [oslo]}, {"role": "user", "content": [lima]}) == in_order


def test_consecutive_messages_of_one_role_are_one_turn(client, model):
    def count(messages):
        return client.messages.count_tokens(model=model, messages=messages).input_tokens

    assert count([{"role": "user", "content": "Hello"}, {"role": "user", "content": " World"}]) == count(
        [{"role": "user", "content": "Hello World"}])
    assert count([*ASK, {"role": "assistant", "content": "The"}, {"role": "assistant", "content": " weather"}]) == count(
        [*ASK, {"role": "assistant", "content": "The weather"}])


@pytest.mark.parametrize("messages, names", [
    ([*ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
      {"role": "user", "content": [{"type": "text", "text": "here:"},
                                   {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}],
     "messages.2.content.1"),
    ([{"role": "user", "content": []}, *ASK], "messages.0.content"),
    ([*ASK, {"role": "assistant", "content": "Sure "}], "messages.1"),
])
def test_what_anthropic_refuses_in_a_conversation_is_a_400_naming_it(server, messages, names):
    r = httpx.post(f"{server.base_url}/v1/messages", json={"max_tokens": 4, "messages": messages}, timeout=30)
    assert r.status_code == 400 and names in r.json()["error"]["message"], r.text


def test_a_tool_whose_input_is_no_object_is_refused(server):
    r = httpx.post(f"{server.base_url}/v1/messages", timeout=30, json={
        "max_tokens": 4, "messages": ASK, "tools": [{"name": "f", "input_schema": {"type": "string"}}]})
    assert r.status_code == 400 and "tools.0.input_schema.type" in r.json()["error"]["message"], r.text


def test_a_finished_call_a_stop_sequence_then_cut_is_still_tool_use(client, model):
    message = client.messages.create(model=model, max_tokens=60, messages=ASK, tools=TOOLS,
                                     tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                     thinking={"type": "disabled"}, stop_sequences=["</tool_call>"],
                                     extra_body=GREEDY)
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"


def test_a_text_document_reaches_the_prompt_with_its_title_and_context_in_a_user_turn_and_a_tool_result(client,
                                                                                                      model):
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Lima: 19 C, fog."},
           "title": "Forecast", "context": "issued today", "citations": {"enabled": True}}
    as_blocks = {"type": "document", "source": {"type": "content", "content": [
        {"type": "text", "text": "Lima: 19 C, "}, {"type": "text", "text": "fog."}]}}
    ask = [{"role": "user", "content": [doc, {"type": "text", "text": "What is the weather in Lima?"}]}]
    body = MessagesRequest.model_validate({"max_tokens": 4, "messages": ask}).to_chat_body()
    assert body["messages"] == [{"role": "user", "content": (
        "<document>\n<source>Forecast</source>\n<context>issued today</context>\n<document_content>\n"
        "Lima: 19 C, fog.\n</document_content>\n</document>\nWhat is the weather in Lima?")}]
    plain = client.messages.count_tokens(model=model, messages=ASK).input_tokens
    assert client.messages.count_tokens(model=model, messages=ask).input_tokens > plain
    message = client.messages.create(model=model, max_tokens=2, messages=ask, extra_body=GREEDY)
    assert message.stop_reason == "max_tokens"

    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                              "input": {"city": "Lima"}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [as_blocks]}]}
    body = MessagesRequest.model_validate({"max_tokens": 4, "messages": [*ASK, call, result]}).to_chat_body()
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_1", "content": (
        "<document>\n<document_content>\nLima: 19 C, fog.\n</document_content>\n</document>\n")}
    assert client.messages.count_tokens(model=model, messages=[*ASK, call, result], tools=TOOLS).input_tokens > \
        client.messages.count_tokens(model=model, messages=[*ASK, call, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": ""}]}], tools=TOOLS).input_tokens


def test_a_cut_calls_number_past_float_range_is_left_out_of_its_input_rather_than_failing_the_response():
    from server.output.messages_events import call_input

    # A call the readers cut at 1e400 (json_stream refuses numbers past float range): its input is what
    # came before, and the response can still be written as JSON.
    value = call_input('{"x": "a", "a": 1e400, "b": [1, -1e400], "c": {"d": 2e999')
    assert value == {"x": "a", "b": [1], "c": {}}
    json.dumps(value, allow_nan=False)


def test_a_plain_word_field_renamed_for_the_client_keeps_its_english(server, model):
    r = httpx.post(f"{server.base_url}/v1/messages", timeout=30, json={
        "model": model, "max_tokens": 4, "messages": ASK, "stop_sequences": [f"s{i}" for i in range(17)]})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert message.startswith("stop_sequences:") and "at most 16 strings" in message, message
    assert message.count("stop") == 1, message
