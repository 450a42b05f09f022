"""Stored Responses API turns: `previous_response_id`, `GET`, `DELETE` and `input_items`.

A finished turn is kept (unless `store: false`); the next turn may name it
and send only what is new, and renders exactly the prompt the client would
have rendered by resending everything (the prefix cache then reuses the last
turn's tokens); a stored turn is answered again, listed item by item, and
deleted; what is not stored answers an error naming the field (404; 400 as
`previous_response_id`, OpenAI's status for it); the store is
bounded, least recently used first out, and an early turn's eviction never
breaks a later one. A background turn is answered `queued` at once, runs on,
is read back by id, and is cancelled by id.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from engine_samplers import SlowSampler, swapped
from live_server import live_server
from server.responses_store import ResponsesStore, StoredResponse

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Lima", "Oslo"]}},
                         "required": ["city"]}}]


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


def _call_turn(client, model, **extra):
    return client.responses.create(model=model, instructions="You check the weather.",
                                   input="What is the weather in Lima?", tools=TOOLS, tool_choice="required",
                                   parallel_tool_calls=False, max_output_tokens=200, temperature=0,
                                   extra_body={"reasoning_budget_tokens": 8}, **extra)


def _result(first):
    [call] = [item for item in first.output if item.type == "function_call"]
    return {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 19}'}


def test_a_turn_naming_the_previous_response_renders_what_resending_the_history_renders(client, model):
    first = _call_turn(client, model)
    assert first.store is True
    chained = client.responses.create(model=model, previous_response_id=first.id, instructions="You check the weather.",
                                      input=[_result(first)], tools=TOOLS, max_output_tokens=4, temperature=0)
    history = [{"role": "user", "content": "What is the weather in Lima?"},
               *[item.model_dump(exclude_none=True) for item in first.output], _result(first)]
    resent = client.responses.create(model=model, instructions="You check the weather.", input=history, tools=TOOLS,
                                     max_output_tokens=4, temperature=0)
    assert chained.previous_response_id == first.id
    assert chained.usage.input_tokens == resent.usage.input_tokens > first.usage.input_tokens
    assert [i.model_dump() for i in chained.output] != [] and _texts(chained) == _texts(resent)
    # The first turn's prompt is reused whole, to its last full page of 16.
    assert chained.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 16 * 16


def _texts(response) -> list[str]:
    return [i.arguments if i.type == "function_call" else i.content[0].text for i in response.output]


def test_a_previous_turns_instructions_are_not_carried_over(client, model, server):
    first = _call_turn(client, model)
    bare = client.responses.create(model=model, previous_response_id=first.id, input=[_result(first)], tools=TOOLS,
                                   max_output_tokens=1, temperature=0)
    history = [{"role": "user", "content": "What is the weather in Lima?"},
               *[item.model_dump(exclude_none=True) for item in first.output], _result(first)]
    resent = client.responses.create(model=model, input=history, tools=TOOLS, max_output_tokens=1, temperature=0)
    assert bare.usage.input_tokens == resent.usage.input_tokens, "no system message from the first turn"


def test_a_stored_turn_is_answered_again_until_it_is_deleted(client, model, server):
    first = _call_turn(client, model, metadata={"task": "weather"})
    again = client.responses.retrieve(first.id)
    assert again.model_dump() == first.model_dump() and again.metadata == {"task": "weather"}
    deleted = httpx.delete(f"{server.v1}/responses/{first.id}", timeout=30)
    assert deleted.status_code == 200 and deleted.json() == {"id": first.id, "object": "response", "deleted": True}
    gone = httpx.get(f"{server.v1}/responses/{first.id}", timeout=30)
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "response_id"
    assert httpx.delete(f"{server.v1}/responses/{first.id}", timeout=30).status_code == 404


def test_a_streamed_turn_is_stored_as_it_ended(client, model):
    events = list(client.responses.create(model=model, input="Tell me a story.", max_output_tokens=5, temperature=0,
                                          stream=True))
    final = events[-1].response
    assert events[-1].type == "response.incomplete" and final.output
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_a_turn_with_store_false_is_not_kept_and_cannot_be_continued(client, model, server):
    first = _call_turn(client, model, store=False)
    assert first.store is False
    assert httpx.get(f"{server.v1}/responses/{first.id}", timeout=30).status_code == 404
    r = httpx.post(f"{server.v1}/responses", timeout=60,
                   json={"model": model, "previous_response_id": first.id, "input": [_result(first)]})
    assert r.status_code == 400, r.text  # OpenAI's status and code for it
    error = r.json()["error"]
    assert error["param"] == "previous_response_id" and first.id in error["message"]
    assert error["code"] == "previous_response_not_found"


def test_input_items_list_the_turns_context_newest_first_and_page(client, model, server):
    first = _call_turn(client, model)
    second = client.responses.create(model=model, previous_response_id=first.id, input=[_result(first)],
                                     max_output_tokens=2, temperature=0)
    listed = httpx.get(f"{server.v1}/responses/{second.id}/input_items", params={"order": "asc"}, timeout=30).json()
    kinds = [item["type"] for item in listed["data"]]
    # The first turn's question, its output (thought and call), then the result this turn sent.
    assert kinds == ["message", *[i.type for i in first.output], "function_call_output"]
    assert listed["data"][0]["content"] == [{"type": "input_text", "text": "What is the weather in Lima?"}]
    assert [i["id"] for i in listed["data"][1:-1]] == [i.id for i in first.output]
    assert len({item["id"] for item in listed["data"]}) == len(kinds), "every item has its own id"
    newest = httpx.get(f"{server.v1}/responses/{second.id}/input_items", params={"limit": 1}, timeout=30).json()
    assert newest["data"] == listed["data"][-1:] and newest["has_more"] is True
    rest = httpx.get(f"{server.v1}/responses/{second.id}/input_items",
                     params={"limit": 100, "after": newest["last_id"]}, timeout=30).json()
    assert rest["data"] == listed["data"][-2::-1] and rest["has_more"] is False
    bad = httpx.get(f"{server.v1}/responses/{second.id}/input_items", params={"limit": 0}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_a_chained_demo_turn_reuses_the_thought_and_call_of_the_one_it_names():
    """With a model whose output re-renders as it was generated, naming the last turn reuses its prompt,
    thought and call (the tool-call anchor's case) as resending them does."""
    demo_tools = json.loads((ROOT / "configs" / "demo_tools.json").read_text())
    flat = [{"type": "function", **t["function"]} for t in demo_tools]
    with live_server(ROOT / "models" / "demo" / "checkpoint", page_size=4, max_model_len=2048,
                     kv_cache_tokens=8192, served_model_name="demo") as demo:
        client = openai.OpenAI(base_url=demo.v1, api_key="unused", max_retries=0, timeout=120)
        first = client.responses.create(model="demo", input="What is 12 + 30?", tools=flat, temperature=0,
                                        max_output_tokens=300)
        calls = [item for item in first.output if item.type == "function_call"]
        assert first.status == "completed" and calls, first.output
        results = [{"type": "function_call_output", "call_id": c.call_id, "output": '{"result": 42}'} for c in calls]
        second = client.responses.create(model="demo", previous_response_id=first.id, input=results, tools=flat,
                                         temperature=0, max_output_tokens=300)
    reused = second.usage.input_tokens_details.cached_tokens
    thought = first.usage.output_tokens_details.reasoning_tokens
    assert thought > 0 and reused >= first.usage.input_tokens + thought - 4, (reused, first.usage)
    assert "42" in second.output_text


def test_a_server_that_stores_nothing_says_so_and_refuses_to_continue(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), responses_store_size=0) as s:
        body = {"input": "hi", "max_output_tokens": 2}
        first = httpx.post(f"{s.v1}/responses", json=body, timeout=60).json()
        assert first["store"] is False
        r = httpx.post(f"{s.v1}/responses", json={**body, "previous_response_id": first["id"]}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"


def _entry(rid: str, context=(), output=()) -> StoredResponse:
    return StoredResponse({"id": rid, "output": list(output)}, list(context))


def test_the_store_keeps_the_most_recently_used_turns_up_to_its_size():
    store = ResponsesStore(2)
    store.put(_entry("a"))
    store.put(_entry("b"))
    assert store.get("a") is not None  # a use: "b" is now the least recent
    store.put(_entry("c"))
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert len(store) == 2


def test_an_evicted_early_turn_does_not_break_a_later_one():
    store = ResponsesStore(2)
    question = {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    answer = {"id": "msg_2", "type": "message", "role": "assistant", "content": []}
    store.put(_entry("a", [question], [answer]))
    follow = {"id": "msg_3", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "and?"}]}
    store.put(_entry("b", [*store.get("a").next_context(), follow]))
    store.put(_entry("c"))  # evicts "a"
    assert store.get("a") is None
    assert [i["id"] for i in store.get("b").next_context()] == ["msg_1", "msg_2", "msg_3"]


def test_a_store_of_size_zero_keeps_nothing():
    store = ResponsesStore(0)
    store.put(_entry("a"))
    assert not store.enabled and store.get("a") is None


def _sized(rid: str, size: int, context=()) -> StoredResponse:
    return StoredResponse({"id": rid, "output": []}, list(context), size)


def test_a_store_over_its_byte_budget_evicts_the_oldest_turns_but_keeps_the_newest():
    store = ResponsesStore(100, max_bytes=10_000)
    store.put(_sized("a", 5_000))
    store.put(_sized("b", 3_000))
    assert store.get("a") is not None and store.bytes == 8_000  # a use: "b" is now the least recent
    store.put(_sized("c", 4_000))  # 12 000 would be held
    assert store.get("b") is None and store.get("a") is not None and store.bytes == 9_000
    store.put(_sized("huge", 50_000))  # alone over the budget, yet the next turn will name it
    assert [rid for rid in ("a", "c", "huge") if store.get(rid)] == ["huge"] and store.bytes == 50_000


def test_items_a_chain_of_turns_shares_are_counted_once_and_freed_with_their_last_holder():
    store = ResponsesStore(100, max_bytes=10**9)
    big = {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 100_000}]}
    store.put(_sized("a", 0, [big]))
    one_holder = store.bytes
    assert one_holder > 100_000
    for rid in "bcdefghij":  # a chain of nine more turns over the same item
        store.put(_sized(rid, 0, [big, {"id": f"msg_{rid}", "type": "message"}]))
    assert store.bytes < one_holder + 10_000  # not ten copies of it
    for rid in "abcdefghi":
        store.delete(rid)
    assert store.bytes > 100_000  # "j" still holds it
    store.delete("j")
    assert store.bytes == 0


def test_a_server_evicts_stored_turns_past_its_byte_budget_counting_each_request_body(tiny_checkpoint):
    # Each body is ~0.6 MiB of JSON whitespace around a two-word prompt: only the bytes are big.
    padded = json.dumps({"input": "hi", "max_output_tokens": 2}).replace(",", "," + " " * 600_000)
    with live_server(tiny_checkpoint("qwen3"), responses_store_mib=1) as s:
        def post():
            r = httpx.post(f"{s.v1}/responses", content=padded, headers={"content-type": "application/json"},
                           timeout=60)
            assert r.status_code == 200, r.text
            return r.json()["id"]

        first, second = post(), post()
        assert httpx.get(f"{s.v1}/responses/{first}", timeout=60).status_code == 404
        assert httpx.get(f"{s.v1}/responses/{second}", timeout=60).status_code == 200


def test_a_chained_turn_is_prepared_on_the_lane_its_whole_history_calls_for(server, monkeypatch):
    import server.routes.responses as responses_route

    sizes: list[int] = []
    prepare = responses_route.off_loop

    async def spy(fn, *args, text_size=0, **kwargs):
        sizes.append(text_size)
        return await prepare(fn, *args, text_size=text_size, **kwargs)

    monkeypatch.setattr(responses_route, "off_loop", spy)
    first = httpx.post(f"{server.v1}/responses", json={"input": "the " * 250, "max_output_tokens": 1}, timeout=60)
    assert first.status_code == 200, first.text
    then = {"previous_response_id": first.json()["id"], "input": "hi", "max_output_tokens": 1}
    assert httpx.post(f"{server.v1}/responses", json=then, timeout=60).status_code == 200
    assert sizes[1] > 1000  # the stored question renders again, though the body says only "hi"


@pytest.fixture
def slowed(server):
    """5 ms more a decoding step: a turn the test looks at while it runs is still running when it looks
    (unslowed, 400 tokens take about 0.4 s, a loaded machine's HTTP round trips a good part of that)."""
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.005)):
        yield


def _open_stream(server, **body):
    """A streamed turn, its connection left open once `response.created` has been read.

    Greedy on a prompt that runs to the cap (see LONG below): a sampled turn on random
    weights may meet its end of turn within a few tokens, before the test has looked."""
    client = httpx.Client(timeout=60)
    stream = client.stream("POST", f"{server.v1}/responses",
                           json={"input": "Write at length.", "max_output_tokens": 400, "temperature": 0,
                                 "stream": True, **body})
    response = stream.__enter__()
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("data: "):
            created = json.loads(line[6:])
            assert created["type"] == "response.created"
            return client, stream, lines, created["response"]["id"]
    raise AssertionError("no response.created event")


def test_a_running_turn_is_stored_in_progress_and_cannot_be_continued_yet(server, slowed):
    client, stream, lines, rid = _open_stream(server)
    try:
        running = httpx.get(f"{server.v1}/responses/{rid}", timeout=60)
        assert running.status_code == 200 and running.json()["status"] == "in_progress", running.text
        follow = httpx.post(f"{server.v1}/responses", json={"previous_response_id": rid, "input": "and?"}, timeout=60)
        assert follow.status_code == 400 and follow.json()["error"]["param"] == "previous_response_id", follow.text
        for _ in lines:  # read to the end
            pass
    finally:
        stream.__exit__(None, None, None)
        client.close()
    assert httpx.get(f"{server.v1}/responses/{rid}", timeout=60).json()["status"] in ("completed", "incomplete")


def _ended(server, rid: str) -> dict:
    deadline = time.monotonic() + 30
    while (stored := httpx.get(f"{server.v1}/responses/{rid}", timeout=60).json())["status"] == "in_progress":
        assert time.monotonic() < deadline, "still in progress long after it should have ended"
        time.sleep(0.1)
    return stored


def test_a_turn_whose_client_left_mid_stream_is_stored_as_cancelled_with_what_it_saw(server, slowed):
    client, stream, lines, rid = _open_stream(server)
    seen = None
    for line in lines:  # up to the first text delta of the first item
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["type"] == "response.output_item.added":
                seen = event["item"]["id"]
            if event["type"].endswith(".delta"):
                break
    stream.__exit__(None, None, None)  # hang up
    client.close()
    stored = _ended(server, rid)
    assert stored["status"] == "cancelled" and seen is not None
    assert [item["id"] for item in stored["output"]][:1] == [seen]  # the item open when it left, as far as it got


def test_a_turn_deleted_while_it_runs_stays_deleted_when_it_ends(server, slowed):
    client, stream, lines, rid = _open_stream(server)
    try:
        deleted = httpx.delete(f"{server.v1}/responses/{rid}", timeout=60)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        for _ in lines:
            pass
    finally:
        stream.__exit__(None, None, None)
        client.close()
    assert httpx.get(f"{server.v1}/responses/{rid}", timeout=60).status_code == 404


def test_a_fault_while_answering_is_stored_as_failed_not_left_in_progress(server, monkeypatch):
    import server.routes.responses as responses_route

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(responses_route, "_usage", broken)
    r = httpx.post(f"{server.v1}/responses", json={"input": "hi", "max_output_tokens": 2}, timeout=60)
    assert r.status_code == 500
    rid = list(server.state.responses._entries)[-1]  # the newest turn: the 500 names none
    stored = httpx.get(f"{server.v1}/responses/{rid}", timeout=60).json()
    assert stored["status"] == "failed" and stored["error"]["code"] == "server_error"


# -- background turns: answered `queued` at once, run on, read back by id, cancelled by id

# Output tokens: greedy on this checkpoint and prompt, the turn runs until the context is full (512 tokens
# on the test server, so about 490 of them, a second's decoding): `incomplete`, as checked below.
LONG = 1500


def _until_ended(client, rid: str, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while True:
        got = client.responses.retrieve(rid)
        if got.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_background_turn_answers_queued_at_once_and_is_read_back_as_a_foreground_turn_would_end(client, model):
    ask = dict(model=model, input="Say something.", max_output_tokens=12, temperature=0)
    started = client.responses.create(background=True, **ask)
    assert started.status == "queued" and started.background is True and started.output == []
    ended = _until_ended(client, started.id)
    alone = client.responses.create(**ask)
    assert ended.status == alone.status == "incomplete"
    assert ended.output_text == alone.output_text and ended.usage.output_tokens == alone.usage.output_tokens


def test_a_cancelled_background_turn_ends_cancelled_and_frees_the_engine(client, model, server):
    ask = dict(model=model, input="Write at length.", max_output_tokens=LONG, temperature=0)
    started = client.responses.create(background=True, **ask)
    cancelled = client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(started.id).status == "cancelled"
    assert client.responses.cancel(started.id).status == "cancelled"  # a second cancel answers it as it is
    assert server.state.background == {}
    # Not a turn that happened to end by itself: run to the end, the same turn is cut by the cap.
    assert _until_ended(client, client.responses.create(background=True, **ask).id, 120).status == "incomplete"


def test_cancelling_a_foreground_turn_is_a_400_naming_background(client, model, server):
    done = client.responses.create(model=model, input="Hi.", max_output_tokens=2)
    r = httpx.post(f"{server.v1}/responses/{done.id}/cancel", timeout=30)
    assert r.status_code == 400 and "background" in r.json()["error"]["message"]
    assert httpx.post(f"{server.v1}/responses/resp_nothing/cancel", timeout=30).status_code == 404


def test_background_without_the_store_is_refused_naming_the_field(server):
    r = httpx.post(f"{server.v1}/responses", timeout=30,
                   json={"input": "Hi.", "max_output_tokens": 2, "background": True, "store": False})
    assert r.status_code == 400 and r.json()["error"]["param"] == "background", r.text


def test_a_background_turn_deleted_while_it_runs_stops_and_stays_deleted(client, model, server):
    started = client.responses.create(model=model, input="Write at length.", max_output_tokens=LONG,
                                      temperature=0, background=True)
    client.responses.delete(started.id)
    assert server.state.background == {}  # nobody can read it: it is stopped, not left to decode to the cap
    deadline = time.monotonic() + 30
    while server.state.engine.num_running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.state.engine.num_running == 0
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(started.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel(started.id)


def test_a_running_background_turn_the_store_evicted_is_still_read_and_cancelled_by_id(client, model, server):
    store = server.state.responses
    started = client.responses.create(model=model, input="Write at length.", max_output_tokens=LONG,
                                      temperature=0, background=True)
    store._remove(started.id)  # as the store's bound evicts the least recently used when it is full
    assert client.responses.retrieve(started.id).status in ("queued", "in_progress")
    assert client.responses.cancel(started.id).status == "cancelled"
    assert client.responses.retrieve(started.id).status == "cancelled"  # its last word stored it again
