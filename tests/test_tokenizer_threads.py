"""Tokenizer work runs on threads that each own a tokenizer, so one slow encode does not hold the server.

Each tokenizer thread deep-copies the shared tokenizer on first use (a fast
tokenizer switches state per encode and must not be shared across threads);
other threads keep the shared one. With two threads, a /tokenize that is stuck
does not stop a chat request from being prepared and answered.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from transformers import PreTrainedTokenizerFast

from live_server import live_server
from server.tokenizer_thread import THREADS, off_loop, own_tokenizer, warm


def test_outside_the_tokenizer_threads_the_shared_tokenizer_is_used():
    shared = object()
    assert own_tokenizer(shared) is shared


def test_each_tokenizer_thread_keeps_its_own_copy():
    shared = {"vocab": [1, 2, 3]}

    async def copies():
        # Hold each thread until every thread has taken its copy, so each thread answers once.
        barrier = threading.Barrier(THREADS)

        def take():
            mine = own_tokenizer(shared)
            barrier.wait(timeout=30)
            return mine, own_tokenizer(shared)

        return await asyncio.gather(*(off_loop(take) for _ in range(THREADS)))

    pairs = asyncio.run(copies())
    for first, again in pairs:
        assert first == shared and first is not shared and again is first
    assert len({id(first) for first, _ in pairs}) == THREADS


def test_warming_gives_every_tokenizer_thread_and_the_large_lane_its_copy_before_any_request(monkeypatch):
    import server.tokenizer_thread as threads

    shared = {"vocab": [4, 5]}
    warm(shared)

    def no_more_copies(_):
        raise AssertionError("a thread copied the tokenizer after warming")

    monkeypatch.setattr(threads.copy, "deepcopy", no_more_copies)

    async def copies():
        barrier = threading.Barrier(THREADS)

        def held():
            barrier.wait(timeout=30)
            return own_tokenizer(shared)

        return await asyncio.gather(*(off_loop(held) for _ in range(THREADS)))

    made = asyncio.run(copies())
    assert all(c == shared and c is not shared for c in made) and len({id(c) for c in made}) == THREADS
    large = asyncio.run(off_loop(own_tokenizer, shared, text_size=threads.LARGE_TEXT))  # the large-text lane's
    assert large == shared and large is not shared and all(large is not c for c in made)


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        yield s


def test_a_stuck_tokenize_request_does_not_hold_a_chat_request(server, monkeypatch):
    gate, entered = threading.Event(), threading.Event()
    encode = PreTrainedTokenizerFast.encode

    def gated(self, text, *args, **kwargs):
        if text == "GATED":
            entered.set()
            gate.wait(timeout=120)
        return encode(self, text, *args, **kwargs)

    monkeypatch.setattr(PreTrainedTokenizerFast, "encode", gated)
    with ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(httpx.post, server.base_url + "/tokenize", json={"content": "GATED"}, timeout=180)
        try:
            assert entered.wait(timeout=60)
            chat = httpx.post(server.base_url + "/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            assert chat.status_code == 200, chat.text
            assert not stuck.done()
        finally:
            gate.set()
        assert stuck.result().status_code == 200


def test_large_texts_queue_on_their_own_lane_and_never_in_front_of_the_rest():
    from server.tokenizer_thread import LARGE_TEXT

    async def run():
        release = threading.Event()
        # More large jobs than the ordinary pool has threads, each stuck until released.
        large = [asyncio.ensure_future(off_loop(release.wait, 30, text_size=LARGE_TEXT)) for _ in range(THREADS + 1)]
        try:
            small = await asyncio.wait_for(off_loop(lambda: "prepared", text_size=100), timeout=10)
        finally:
            release.set()
        assert all(await asyncio.gather(*large))
        return small

    assert asyncio.run(run()) == "prepared"
