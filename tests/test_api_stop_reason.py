"""vLLM's `stop_reason` on chat and completions choices: the client's stop string that ended a choice, named.

A choice a stop string ended says which one, whole and streamed (on the chunk
that carries its finish_reason); a choice that ended otherwise names none.
The text stops before the string, as OpenAI and vLLM cut it.
"""

from __future__ import annotations

import json

import httpx
import pytest

from live_server import live_server


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


@pytest.fixture(scope="module")
def model(server):
    return httpx.get(f"{server.v1}/models", timeout=30).json()["data"][0]["id"]


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_chat_and_completions_name_the_stop_string_that_ended_a_choice_as_vllm_does(server, model, route):
    ask = {"model": model, "max_tokens": 40, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}
    ask = {**ask, "messages": [{"role": "user", "content": "Write at length."}]} if "chat" in route else {
        "model": model, "max_tokens": 40, "temperature": 0, "prompt": "Write at length."}

    def text(choice):
        return choice["message"]["content"] if "chat" in route else choice["text"]

    def ask_for(**extra):
        r = httpx.post(f"{server.base_url}{route}", json={**ask, **extra}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]

    whole = text(ask_for())
    assert len(whole) > 12, whole
    stop = whole[8:11]
    cut = ask_for(stop=[stop, "\u2603never"])
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop and text(cut) == whole[:whole.index(stop)]
    streamed = httpx.post(f"{server.base_url}{route}", json={**ask, "stop": [stop], "stream": True}, timeout=60).text
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert [c["choices"][0].get("stop_reason") for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] \
        == [stop]
    assert "stop_reason" not in ask_for()  # ended otherwise: not named


def test_a_stop_token_id_that_ended_a_choice_is_named_and_the_models_own_end_is_not(server, model):
    ask = {"model": model, "prompt": "Write at length.", "max_tokens": 40, "temperature": 0, "return_token_ids": True}
    ids = httpx.post(f"{server.v1}/completions", json=ask, timeout=60).json()["choices"][0]["token_ids"]
    stop_id = ids[3]
    cut = httpx.post(f"{server.v1}/completions", json={**ask, "stop_token_ids": [stop_id]}, timeout=60).json()
    assert cut["choices"][0]["finish_reason"] == "stop" and cut["choices"][0]["stop_reason"] == stop_id
    assert cut["choices"][0]["token_ids"] == ids[:ids.index(stop_id) + 1]


def test_the_models_own_end_listed_as_a_stop_id_is_not_named(server, model):
    eos = server.token_id("<|im_end|>")
    r = httpx.post(f"{server.v1}/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "temperature": 0,
        "stop_token_ids": [eos], "logit_bias": {str(eos): 100}})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and "stop_reason" not in choice, choice
