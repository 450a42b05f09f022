"""Streamed background turns: `background` and `stream` both true, and resuming them by id.

The turn runs on a task of its own: the POST's stream follows its events, a
client that hangs up stops reading and not the turn, and
`GET /v1/responses/{id}?stream=true&starting_after=N` picks up after event N
with no gap and no repeat -- live while the turn runs, replayed after it
ended. A cancel reaches every reader. What cannot be resumed is refused
naming the field.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from engine_samplers import SlowSampler, swapped
from live_server import live_server
from server.responses_replay import EventLog
from server.routes.responses_background import RECHARGE_EVERY

LONG = 1500  # greedy on this checkpoint and prompt, the turn runs until the context is full (test_api_responses_store)


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


def _events(lines):
    """The events of SSE `lines`, read one by one as they come."""
    return (json.loads(line[6:]) for line in lines if line.startswith("data: "))


def _open(server, **body):
    """A streamed background turn, its connection open; the caller reads `lines` and closes it."""
    client = httpx.Client(timeout=60)
    stream = client.stream("POST", f"{server.v1}/responses", json={
        "input": "Write at length.", "temperature": 0, "background": True, "stream": True, **body})
    response = stream.__enter__()
    assert response.status_code == 200, response.read()
    return client, stream, response.iter_lines()


def _until_first_delta(lines) -> list[dict]:
    """The events of `lines` up to the first text delta, read as they come (the turn is running then)."""
    seen = []
    for event in _events(lines):
        seen.append(event)
        if event["type"].endswith(".delta"):
            return seen
    return seen


def _resume(server, rid: str, **params) -> list[dict]:
    r = httpx.get(f"{server.v1}/responses/{rid}", params={"stream": "true", **params}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    return list(_events(r.text.splitlines()))


# -- the log: readers at their own pace, from any point, woken by each event and by the close

def test_a_log_gives_each_reader_the_events_after_its_point_then_follows_until_closed():
    async def scenario():
        log = EventLog()
        log.append("e0")
        log.append("e1")
        from_start, from_one = [], []

        async def read(after, into):
            async for event in log.follow(after):
                into.append(event)

        readers = [asyncio.create_task(read(-1, from_start)), asyncio.create_task(read(0, from_one))]
        await asyncio.sleep(0)
        log.append("e2")
        await asyncio.sleep(0)
        log.close()
        await asyncio.wait_for(asyncio.gather(*readers), 5)
        return from_start, from_one, [e async for e in log.follow(5)]

    assert asyncio.run(scenario()) == (["e0", "e1", "e2"], ["e1", "e2"], [])


# -- through the API

def test_a_streamed_background_turn_is_queued_first_and_answers_as_a_foreground_stream_would(client, model):
    ask = dict(model=model, input="Say something.", max_output_tokens=12, temperature=0)
    events = list(client.responses.create(background=True, stream=True, **ask))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"], kinds
    assert events[0].response.status == "queued" and events[0].response.background is True
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[-1] == "response.incomplete"
    foreground = list(client.responses.create(stream=True, **ask))
    assert [e.type for e in foreground][2:] == kinds[3:]  # the same items, deltas and end
    assert events[-1].response.output_text == foreground[-1].response.output_text
    stored = client.responses.retrieve(events[0].response.id)
    assert stored.status == "incomplete" and stored.output_text == foreground[-1].response.output_text


def test_a_client_that_hangs_up_leaves_the_turn_running_and_resumes_after_the_last_event_it_saw(server):
    http, stream, lines = _open(server, max_output_tokens=40)
    seen = []
    for event in _events(lines):
        seen.append(event)
        if event["type"].endswith(".delta"):
            break
    stream.__exit__(None, None, None)  # hang up
    http.close()
    rid, last = seen[0]["response"]["id"], seen[-1]["sequence_number"]
    rest = _resume(server, rid, starting_after=last)  # live if it still runs, replayed if it ended
    assert [e["sequence_number"] for e in seen + rest] == list(range(len(seen) + len(rest)))
    assert rest[-1]["type"] == "response.incomplete"  # ran to its cap: nobody cancelled it
    assert rest[-1]["response"]["usage"]["output_tokens"] == 40
    assert httpx.get(f"{server.v1}/responses/{rid}", timeout=30).json()["status"] == "incomplete"


def test_a_finished_stream_is_replayed_byte_for_byte(server):
    http, stream, lines = _open(server, max_output_tokens=16)
    try:
        first = [line for line in lines]
    finally:
        stream.__exit__(None, None, None)
        http.close()
    rid = next(_events(first))["response"]["id"]
    again = httpx.get(f"{server.v1}/responses/{rid}", params={"stream": "true"}, timeout=60)
    assert again.text.splitlines() == first
    assert _resume(server, rid, starting_after=len(list(_events(first))) - 1) == []  # nothing after the last


def test_cancelling_a_streamed_background_turn_ends_every_reader_with_the_cancel(server, client):
    # 5 ms more a step: the cancel arrives while the turn runs, however loaded the machine is.
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.005)):
        http, stream, lines = _open(server, max_output_tokens=LONG)
        try:
            seen = _until_first_delta(lines)
            rid = seen[0]["response"]["id"]
            assert client.responses.cancel(rid).status == "cancelled"
            rest = list(_events(lines))  # the connection that asked, read on to its end
        finally:
            stream.__exit__(None, None, None)
            http.close()
    assert rest[-1]["type"] == "response.cancelled" and rest[-1]["response"]["status"] == "cancelled"
    assert _resume(server, rid, starting_after=seen[-1]["sequence_number"]) == rest  # a late reader hears the same
    assert server.state.background == {}


def test_the_sdk_resumes_a_stream_by_id(client, model):
    with client.responses.create(model=model, input="Write at length.", max_output_tokens=20, temperature=0,
                                 background=True, stream=True) as events:
        created = next(iter(events))
    rest = list(client.responses.retrieve(created.response.id, stream=True, starting_after=created.sequence_number))
    assert rest[0].sequence_number == created.sequence_number + 1 and rest[-1].type == "response.incomplete"


@pytest.mark.parametrize("params, param", [
    ({"stream": "true", "starting_after": "-1"}, "starting_after"),
    ({"stream": "true", "starting_after": "first"}, "starting_after"),
    ({"stream": "maybe"}, "stream"),
])
def test_a_resume_with_a_malformed_query_is_a_400_naming_it(server, client, model, params, param):
    done = client.responses.create(model=model, input="Hi.", max_output_tokens=2, background=True)
    r = httpx.get(f"{server.v1}/responses/{done.id}", params=params, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_streaming_again_a_turn_that_was_not_a_streamed_background_turn_is_a_400_naming_stream(server, client,
                                                                                              model):
    for extra in ({}, {"background": True}):  # foreground (whole), background polled
        done = client.responses.create(model=model, input="Hi.", max_output_tokens=2, **extra)
        r = httpx.get(f"{server.v1}/responses/{done.id}", params={"stream": "true"}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "stream", r.text
    assert httpx.get(f"{server.v1}/responses/resp_nothing", params={"stream": "true"}, timeout=30).status_code == 404


def test_a_kept_stream_is_charged_to_the_store(server, client, model):
    events = list(client.responses.create(model=model, input="Say something.", max_output_tokens=12,
                                          temperature=0, background=True, stream=True))
    entry = server.state.responses.get(events[0].response.id)
    assert entry.events is not None and entry.events.closed
    assert entry.size > entry.events.size > 0


def test_a_running_turns_log_is_charged_to_the_store_as_it_grows(server):
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.005)):
        http, stream, lines = _open(server, max_output_tokens=400)
        rid = None
        try:
            seen = []
            for event in _events(lines):
                seen.append(event)
                if len(seen) == 3 * RECHARGE_EVERY:
                    break
            rid = seen[0]["response"]["id"]
            entry = server.state.responses.get(rid)
            assert entry.response["status"] == "in_progress"
            assert entry.size >= sum(map(len, entry.events.events[:2 * RECHARGE_EVERY]))
        finally:
            stream.__exit__(None, None, None)
            http.close()
            if rid is not None:
                openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0).responses.cancel(rid)


def test_a_turn_the_server_stops_ends_its_log_as_it_is_stored_cancelled(server):
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.005)):
        http, stream, lines = _open(server, max_output_tokens=400)
        try:
            seen = _until_first_delta(lines)
            rid = seen[0]["response"]["id"]
            task = server.state.background[rid].task
            task.get_loop().call_soon_threadsafe(task.cancel)  # as the loop closing at shutdown does
            rest = list(_events(lines))
        finally:
            stream.__exit__(None, None, None)
            http.close()
    stored = httpx.get(f"{server.v1}/responses/{rid}", timeout=30).json()
    assert rest[-1]["type"] == "response.cancelled" and rest[-1]["response"] == stored
    assert stored["status"] == "cancelled"
    log = _resume(server, rid)
    assert [e["sequence_number"] for e in log] == list(range(len(log))) and log[-1] == rest[-1]


def test_resuming_past_the_last_event_of_an_ended_stream_is_a_400_naming_starting_after(server, client, model):
    events = list(client.responses.create(model=model, input="Hi.", max_output_tokens=2, background=True,
                                          stream=True))
    rid, last = events[0].response.id, events[-1].sequence_number
    assert _resume(server, rid, starting_after=last - 1)[0]["sequence_number"] == last  # ends once the log is closed
    assert _resume(server, rid, starting_after=last) == []  # after the last event: nothing more
    r = httpx.get(f"{server.v1}/responses/{rid}", params={"stream": "true", "starting_after": last + 1}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "starting_after", r.text


def test_a_fault_mid_stream_ends_the_log_with_an_error_numbered_where_it_lands(server, monkeypatch):
    from server.output.responses_events import ResponsesEventWriter

    feed, calls = ResponsesEventWriter.feed, []

    def faulty(self, delta):
        out = feed(self, delta)  # numbered, then lost: the writer's count runs ahead of the log
        calls.append(delta)
        if len(calls) == 5:
            raise RuntimeError("a fault of ours")
        return out

    monkeypatch.setattr(ResponsesEventWriter, "feed", faulty)
    http, stream, lines = _open(server, max_output_tokens=40)
    try:
        events = list(_events(lines))
    finally:
        stream.__exit__(None, None, None)
        http.close()
    assert events[-1]["type"] == "error" and "internal error" in events[-1]["message"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    rid = events[0]["response"]["id"]
    assert _resume(server, rid, starting_after=len(events) - 2) == events[-1:]
    assert httpx.get(f"{server.v1}/responses/{rid}", timeout=30).json()["status"] == "failed"


def test_a_turn_cancelled_while_queued_never_says_it_was_in_progress(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), max_num_seqs=1) as one:
        ahead = openai.OpenAI(base_url=one.v1, api_key="unused", max_retries=0).responses
        with swapped(one.state.engine, lambda real: SlowSampler(real, delay=0.005)):
            first = ahead.create(input="Write at length.", max_output_tokens=LONG, temperature=0, background=True)
            http, stream, lines = _open(one, max_output_tokens=8)
            try:
                events = _events(lines)
                created, queued = next(events), next(events)
                assert (created["type"], queued["type"]) == ("response.created", "response.queued")
                assert ahead.cancel(created["response"]["id"]).status == "cancelled"
                rest = [e["type"] for e in events]
            finally:
                stream.__exit__(None, None, None)
                http.close()
                ahead.cancel(first.id)
    assert rest == ["response.cancelled"]
