"""vLLM's `min_tokens`: the end of turn is banned until that many tokens are out.

With the end-of-turn token pushed to the top (logit_bias), a request stops at
once -- unless `min_tokens` holds the end back, and then it stops right after
that many tokens, with `finish_reason: "stop"`. Stop token ids are held back
alike, and stop strings do not match within those tokens; a `min_tokens` above
`max_tokens` is refused naming the field.
"""

from __future__ import annotations

import httpx
import pytest

from live_server import live_server


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


def _ends_now(server) -> dict:
    return {str(server.token_id("<|im_end|>")): 100, str(server.token_id("<|endoftext|>")): 100}


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "Ships leave at dawn"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                              "chat_template_kwargs": {"enable_thinking": False}}),
])
def test_min_tokens_holds_back_an_end_the_model_wants_at_once(server, route, body):
    ask = {**body, "max_tokens": 20, "temperature": 0, "logit_bias": _ends_now(server)}
    eager = httpx.post(server.v1 + route.removeprefix("/v1"), json=ask, timeout=60).json()
    assert eager["usage"]["completion_tokens"] <= 1, "the biased end comes first"
    held = httpx.post(server.v1 + route.removeprefix("/v1"), json={**ask, "min_tokens": 6}, timeout=60).json()
    # Six tokens, then the end the bias still favours (counted: it is a generated token).
    assert held["usage"]["completion_tokens"] == 7 and held["choices"][0]["finish_reason"] == "stop"


def test_min_tokens_holds_back_stop_token_ids_too(server):
    stop_id = server.tokenize(" the")[0]
    ask = {"prompt": "Ships leave at dawn", "max_tokens": 20, "temperature": 0, "logit_bias": {str(stop_id): 100},
           "stop_token_ids": [stop_id], "ignore_eos": True, "min_tokens": 4}
    r = httpx.post(server.v1 + "/completions", json=ask, timeout=60).json()
    assert r["usage"]["completion_tokens"] == 5 and r["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("route, body", [
    ("/completions", {"prompt": "x", "max_tokens": 3, "min_tokens": 4}),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 3,
                           "min_tokens": 4}),
])
def test_min_tokens_above_max_tokens_is_a_400_naming_min_tokens(server, route, body):
    r = httpx.post(server.v1 + route, json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens", r.text


def test_a_stop_string_in_the_first_min_tokens_does_not_end_the_text(server):
    the = server.tokenize(" the")[0]
    ask = {"prompt": "Ships leave at dawn", "max_tokens": 20, "temperature": 0, "logit_bias": {str(the): 100},
           "stop": [" the"], "ignore_eos": True}
    eager = httpx.post(server.v1 + "/completions", json=ask, timeout=60).json()
    assert eager["usage"]["completion_tokens"] == 1 and eager["choices"][0]["text"] == ""
    held = httpx.post(server.v1 + "/completions", json={**ask, "min_tokens": 4}, timeout=60).json()
    # Four " the" pass; the fifth matches the stop string, which ends the text before it.
    assert held["usage"]["completion_tokens"] == 5 and held["choices"][0]["text"] == " the" * 4
