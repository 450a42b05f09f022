"""Responses `truncation: "auto"`: a conversation over the context drops its oldest turns, whole, to fit.

With "disabled" (the default) such a conversation is a 400 `context_length_exceeded` naming `input`, as
OpenAI answers it; with "auto" the server drops turns from the start, keeps the system and developer
messages, and answers from the latest turns that fit: the prompt it ran is exactly the chat request
those turns spell. A last turn that overflows alone is still a 400, which says truncation could not
help. Nothing a client sent is lost: a stored turn still lists all of it.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from live_server import live_server
from server.protocol.responses import FunctionCallItem, FunctionCallOutputItem, MessageItem, ReasoningItem
from server.protocol.responses_truncation import cut_points, first_fitting, kept

CONTEXT = 256


def _user(text: str) -> MessageItem:
    return MessageItem(role="user", content=text)


def test_a_kept_conversation_starts_at_a_user_message_so_no_tool_result_loses_its_call():
    items = [MessageItem(role="developer", content="Be brief."), _user("weather?"),
             ReasoningItem(type="reasoning", content=[{"type": "reasoning_text", "text": "call it"}]),
             FunctionCallItem(type="function_call", call_id="c1", name="get_weather", arguments="{}"),
             FunctionCallOutputItem(type="function_call_output", call_id="c1", output="19C"),
             MessageItem(role="assistant", content="19C."), _user("and tomorrow?")]
    assert cut_points(items) == [1, 6], "a cut at the first item would drop nothing"
    assert kept(items, 6) == [items[0], items[6]], "the developer message stands; the whole first turn goes"
    assert kept(items, 0) == items


def test_the_first_fitting_cut_is_found_by_bisection_with_few_tries():
    points = list(range(1, 101))
    tried = []

    def fits(p):
        tried.append(p)
        return p >= 73

    assert first_fitting(points, fits) == 73
    assert len(tried) <= 7, tried
    assert first_fitting(points, lambda p: False) is None
    assert first_fitting([], lambda p: True) is None


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), max_model_len=CONTEXT) as s:
        yield s


def _long_conversation() -> list[dict]:
    """Six turns of about 60 tokens each: over the 256-token context together, any one of them under it."""
    items: list[dict] = [{"role": "developer", "content": "Answer briefly."}]
    for turn in range(6):
        items += [{"role": "user", "content": f"Turn {turn}: " + "tell me more about the weather " * 6},
                  {"role": "assistant", "content": "It is mild and dry " * 4}]
    items.append({"role": "user", "content": "And now?"})
    return items


def _tokens(server, messages: list[dict]) -> int:
    return httpx.post(server.base_url + "/tokenize", json={"messages": messages}, timeout=60).json()["count"]


def test_without_truncation_an_overflowing_conversation_is_a_400_naming_input(server):
    r = httpx.post(server.v1 + "/responses", json={"input": _long_conversation(), "max_output_tokens": 4}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input", error


def test_truncation_auto_answers_from_the_latest_whole_turns_that_fit(server):
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)
    items = _long_conversation()
    model = client.models.list().data[0].id
    r = client.responses.create(model=model, input=items, truncation="auto", max_output_tokens=4, temperature=0)
    assert r.status in ("completed", "incomplete") and r.truncation == "auto"
    # The prompt it ran is the developer message and the latest turns, each whole, the most that fit.
    as_chat = [{"role": "system" if m["role"] == "developer" else m["role"], "content": m["content"]} for m in items]
    starts = [i for i, m in enumerate(as_chat) if m["role"] == "user"]
    fitting = [s for s in starts if _tokens(server, [as_chat[0], *as_chat[s:]]) < CONTEXT]
    assert fitting and fitting[0] > starts[0], "the test's conversation must overflow, and a later cut must fit"
    assert r.usage.input_tokens == _tokens(server, [as_chat[0], *as_chat[fitting[0]:]])


def test_a_last_turn_too_long_alone_is_still_a_400_that_says_truncation_could_not_help(server):
    items = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": "weather " * 400}]
    r = httpx.post(server.v1 + "/responses", json={"input": items, "truncation": "auto", "max_output_tokens": 4},
                   timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "truncation 'auto'" in error["message"] and "last user turn" in error["message"], error["message"]


def test_a_truncated_turn_still_stores_everything_its_client_sent(server):
    items = _long_conversation()
    r = httpx.post(server.v1 + "/responses", json={"input": items, "truncation": "auto", "max_output_tokens": 4,
                                                   "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    listed = httpx.get(f"{server.v1}/responses/{r.json()['id']}/input_items", params={"limit": 100, "order": "asc"},
                       timeout=60).json()["data"]
    assert [item["content"][0]["text"] for item in listed] == [m["content"] for m in items]
