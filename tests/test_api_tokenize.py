"""llama.cpp's /tokenize and /detokenize: ids, pieces, and the work kept off the event loop.

`with_pieces` names each token by its text, or by its bytes when the token is
only part of a UTF-8 character; the pieces join back to the text. The answer
is built on a tokenizer thread, since a prompt of millions of tokens takes
seconds to cut into pieces and serialise, and on the event loop that held
every other request.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from live_server import live_server
from server.protocol import DetokenizeResponse, TokenizeResponse

TEXT = "Hello wörld, 東京 says 𝄞 twice: 𝄞!"


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


def _tokenize(server, **body) -> list:
    r = httpx.post(server.base_url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    # Written as FastAPI's JSONResponse writes: compact, non-ASCII as itself.
    assert r.content == json.dumps(r.json(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return TokenizeResponse.model_validate(r.json()).model_dump(mode="json")["tokens"]


def test_tokenized_text_detokenizes_back_to_itself(server):
    ids = _tokenize(server, content=TEXT)
    assert ids and all(isinstance(i, int) for i in ids)
    r = httpx.post(server.base_url + "/detokenize", json={"tokens": ids}, timeout=30)
    assert r.status_code == 200, r.text
    assert DetokenizeResponse.model_validate(r.json()).content == TEXT


def test_content_may_mix_strings_and_token_ids_and_name_the_model_as_llama_cpp_takes_it(server):
    hello, there = _tokenize(server, content="Hello"), _tokenize(server, content=" there")
    model = httpx.get(server.v1 + "/models", timeout=30).json()["data"][0]["id"]
    assert _tokenize(server, model=model, content=["Hello", 7, " there"]) == hello + [7] + there
    for bad in (10**6, -1, 1.5, True):  # outside the vocabulary, or no token id at all
        r = httpx.post(server.base_url + "/tokenize", json={"content": ["Hello", bad]}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "content.1", r.text


def test_pieces_carry_the_same_ids_and_join_back_to_the_text(server):
    ids = _tokenize(server, content=TEXT)
    pieces = _tokenize(server, content=TEXT, with_pieces=True)
    assert [p["id"] for p in pieces] == ids
    joined = b"".join(p["piece"].encode("utf-8") if isinstance(p["piece"], str) else bytes(p["piece"])
                      for p in pieces)
    assert joined == TEXT.encode("utf-8")


def test_a_token_that_is_part_of_a_character_is_named_by_its_bytes(server):
    pieces = _tokenize(server, content="𝄞", with_pieces=True)
    raw = [p["piece"] for p in pieces if isinstance(p["piece"], list)]
    assert raw, f"the tiny tokenizer was expected to cut a 4-byte character: {pieces}"
    for piece in raw:
        with pytest.raises(UnicodeDecodeError):
            bytes(piece).decode("utf-8")


def test_token_pieces_are_built_on_a_tokenizer_thread_not_the_event_loop(server, monkeypatch):
    state = server.app.state.server
    threads: set[str] = set()
    original = state.token_bytes

    def recording(token_id: int) -> bytes:
        threads.add(threading.current_thread().name)
        return original(token_id)

    monkeypatch.setattr(state, "token_bytes", recording)
    assert _tokenize(server, content="hello there", with_pieces=True)
    assert threads and all(name.startswith("tokenizer") for name in threads), threads


@pytest.mark.parametrize("route,body", [("/tokenize", {"content": [1, 2, 3]}), ("/detokenize", {"tokens": [1, 2, 3]})])
def test_a_token_list_is_checked_on_a_tokenizer_thread_not_the_event_loop(server, monkeypatch, route, body):
    # A body may hold millions of ids: checking them took seconds, which on the event loop held every request.
    import server.routes.tokenize as routes

    threads: set[str] = set()
    original = routes._validated

    def recording(model, value):
        threads.add(threading.current_thread().name)
        return original(model, value)

    monkeypatch.setattr(routes, "_validated", recording)
    assert httpx.post(server.base_url + route, json=body, timeout=30).status_code == 200
    assert threads and all(name.startswith("tokenizer") for name in threads), threads
