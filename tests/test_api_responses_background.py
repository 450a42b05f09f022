"""Background Responses turns: answered `queued` at once, run on, read back by id, cancelled by id."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from live_server import live_server

LONG = 1500  # output tokens: greedy on this checkpoint and prompt, it runs to the cap (checked below)


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


@pytest.mark.parametrize("extra, status, param", [
    ({"store": False}, 400, "background"),
    ({"stream": True}, 501, "stream"),
])
def test_background_without_the_store_or_with_a_stream_is_refused_naming_the_field(server, extra, status, param):
    r = httpx.post(f"{server.v1}/responses", timeout=30,
                   json={"input": "Hi.", "max_output_tokens": 2, "background": True, **extra})
    assert r.status_code == status and r.json()["error"]["param"] == param, r.text


def test_a_background_turn_deleted_while_it_runs_stays_deleted(client, model, server):
    started = client.responses.create(model=model, input="Write at length.", max_output_tokens=200,
                                      temperature=0, background=True)
    client.responses.delete(started.id)
    deadline = time.monotonic() + 60
    while server.state.background and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(started.id)
