"""Request bodies over `--max-request-body-bytes` are refused with a 413, compressed ones with a 415.

The cap holds whether the client declares the body's length or streams it
chunked; a body within the cap is served as if there were no cap, and the
gate runs first (a client without the key learns that, not the body's size).
"""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from live_server import live_server

LIMIT = 4096
API_KEY = "sk-body-limit"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), max_request_body_bytes=LIMIT, api_key=API_KEY) as s:
        yield s


def _chat_body(text: str, **extra) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 2, **extra}).encode()


def _chunked(body: bytes, size: int = 1000):
    for i in range(0, len(body), size):
        yield body[i: i + size]


def _assert_413(r: httpx.Response) -> None:
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    assert "--max-request-body-bytes" in error["message"] and str(LIMIT) in error["message"]


def test_a_body_with_a_declared_length_over_the_cap_is_a_413_that_names_the_flag(server):
    body = _chat_body("x" * (2 * LIMIT))
    r = httpx.post(server.base_url + "/v1/chat/completions", content=body,
                   headers={**AUTH, "Content-Type": "application/json"}, timeout=60)
    _assert_413(r)


def test_a_chunked_body_over_the_cap_is_a_413_too(server):
    body = _chat_body("x" * (50 * LIMIT))
    r = httpx.post(server.base_url + "/v1/chat/completions", content=_chunked(body),
                   headers={**AUTH, "Content-Type": "application/json"}, timeout=60)
    _assert_413(r)


def test_a_small_declared_length_beside_chunked_framing_does_not_let_a_large_body_in(server):
    # h11 frames such a request by its chunks: the declared length says nothing of the body's size.
    body = _chat_body("hi", user="z" * (20 * LIMIT))  # served (200) if the size goes unnoticed
    host, port = server.base_url.removeprefix("http://").split(":")
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n").encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in _chunked(body)) + b"0\r\n\r\n"
    received: list[bytes] = []

    def read(sock: socket.socket) -> None:
        # Read while sending: the server answers and closes before the whole body is in, and the
        # body it leaves unread makes its kernel reset the connection, which throws away an answer
        # the client has not read by then.
        try:
            while chunk := sock.recv(65536):
                received.append(chunk)
        except OSError:
            pass

    with socket.create_connection((host, int(port)), timeout=60) as sock:
        reader = threading.Thread(target=read, args=(sock,))
        reader.start()
        sock.sendall(head)
        try:
            sock.sendall(chunks)
        except OSError:
            pass  # the server may answer and close before the whole body is sent
        reader.join(60)
    answer = b"".join(received)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"413", answer[:300]


def test_a_chunked_body_within_the_cap_is_served_whole(server):
    body = _chat_body("hello " * 100)
    assert len(body) < LIMIT
    r = httpx.post(server.base_url + "/v1/chat/completions", content=_chunked(body, 97),
                   headers={**AUTH, "Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 100


def test_a_stream_within_the_cap_still_runs_to_its_end(server):
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", content=_chunked(_chat_body("hi", stream=True)),
                      headers={**AUTH, "Content-Type": "application/json"}, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.status_code == 200
    assert lines[-1] == "data: [DONE]"


def test_a_compressed_body_is_a_415_naming_the_encoding(server):
    import gzip

    r = httpx.post(server.base_url + "/v1/chat/completions", content=gzip.compress(_chat_body("hi")),
                   headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"}, timeout=60)
    assert r.status_code == 415, r.text
    error = r.json()["error"]
    assert error["code"] == "unsupported_content_encoding" and "gzip" in error["message"]


def test_an_identity_encoding_is_no_encoding(server):
    r = httpx.post(server.base_url + "/v1/chat/completions", content=_chat_body("hi"),
                   headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "identity"}, timeout=60)
    assert r.status_code == 200, r.text


def test_a_client_without_the_key_is_told_about_the_key_not_the_size(server):
    r = httpx.post(server.base_url + "/v1/chat/completions", content=_chat_body("x" * (2 * LIMIT)),
                   headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 401, r.text
