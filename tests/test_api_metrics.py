"""`GET /metrics` against a live server: the figures move when the server works.

Each test scrapes, does one thing, scrapes again and checks the deltas
against what the responses themselves reported (usage, cached tokens), so a
counter wired to the wrong source fails. The checkpoint has sliding-window
layers and the server slides every 8 decode steps, so the window and anchor
figures have something to count too.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_samplers import SlowSampler, swapped
from live_server import live_server

P = "anchorage:"
WINDOW = 16


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3", sliding_window=WINDOW), swa_eviction_interval=8) as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def no_eos(server):
    return {str(server.token_id(t)): -100 for t in ("<|im_end|>", "<|endoftext|>")}


def scrape(http) -> dict[tuple[str, frozenset], float]:
    r = http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(figures, name: str, **labels) -> float:
    return figures.get((P + name, frozenset(labels.items())), 0.0)


def delta(before, after, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def _wait_idle(http, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        figures = scrape(http)
        if value(figures, "requests_processing") == 0 and value(figures, "requests_deferred") == 0:
            return figures
        assert time.monotonic() < deadline, "the engine never went idle"
        time.sleep(0.05)


def test_a_completion_moves_the_request_and_token_counters(http, no_eos):
    before = _wait_idle(http)
    r = http.post("/v1/completions", json={"prompt": "Count these tokens", "max_tokens": 5, "temperature": 0,
                                           "logit_bias": no_eos})
    assert r.status_code == 200
    usage = r.json()["usage"]
    after = scrape(http)
    assert delta(before, after, "prompt_tokens_total") == usage["prompt_tokens"]
    assert delta(before, after, "tokens_predicted_total") == 5
    assert delta(before, after, "requests_finished_total") == 1
    assert delta(before, after, "engine_steps_total") >= 5  # at least one forward per token
    assert delta(before, after, "http_requests_total", route="/v1/completions", status="200") == 1


def test_requests_are_counted_by_route_and_status(http):
    before = scrape(http)
    http.post("/v1/chat/completions", json={"messages": [], "max_tokens": 1})
    http.post("/v1/chat/completions", json={"messages": [], "max_tokens": 1})
    http.get("/v1/no-such-route")
    http.get("/health")
    after = scrape(http)
    assert delta(before, after, "http_requests_total", route="/v1/chat/completions", status="400") == 2
    # Unknown paths share one label, so a scanner cannot blow up the series count.
    assert delta(before, after, "http_requests_total", route="other", status="404") == 1
    assert delta(before, after, "http_requests_total", route="/health", status="200") == 1


def test_a_repeated_prompt_moves_the_prefix_cache_hit_counter_by_the_cached_tokens(http, no_eos):
    prompt = "Cache this: " + " ".join(uuid.uuid4().hex[:8] for _ in range(30))
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0, "logit_bias": no_eos}
    assert http.post("/v1/completions", json=body).status_code == 200
    before = scrape(http)
    again = http.post("/v1/completions", json=body).json()
    after = scrape(http)
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert delta(before, after, "prefix_cache_hit_tokens_total") == cached


def test_the_pool_gauges_add_up_and_finished_prompts_stay_cached(http, no_eos):
    prompt = "Keep me: " + " ".join(uuid.uuid4().hex[:8] for _ in range(30))
    before = _wait_idle(http)
    assert http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2, "logit_bias": no_eos}).status_code == 200
    after = _wait_idle(http)
    groups = {dict(labels)["group"] for (name, labels) in after if name == P + "kv_pages"}
    assert groups == {"full", "window"}
    for group in groups:
        parts = [value(after, "kv_pages", group=group, state=s) for s in ("free", "owned", "cached")]
        assert sum(parts) == value(after, "kv_pages", group=group, state="total") > 0
        assert value(after, "kv_pages", group=group, state="total") == value(before, "kv_pages", group=group,
                                                                              state="total")
    # The finished prompt's pages stay in the pool (pinned by its slot or cached), not freed.
    assert delta(before, after, "kv_pages", group="full", state="free") < 0
    kept = lambda f: value(f, "kv_pages", group="full", state="owned") + value(f, "kv_pages", group="full", state="cached")  # noqa: E731
    assert kept(after) > kept(before)


def test_a_running_stream_shows_in_the_gauges_and_a_disconnect_frees_it(server, http, no_eos):
    # Idle, the engine still owns the pages that slots pin (their last prompts); the baseline.
    before = _wait_idle(http)
    body = {"prompt": "Go on and on", "max_tokens": 400, "temperature": 0, "logit_bias": no_eos, "stream": True}
    # 5 ms more a step: the request still runs when the scrape reads the gauges, however loaded the machine.
    with swapped(server.state.engine, lambda real: SlowSampler(real, delay=0.005)), \
            httpx.Client(base_url=server.base_url, timeout=120) as other:
        with other.stream("POST", "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            during = scrape(http)
            assert value(during, "requests_processing") == 1
            assert delta(before, during, "kv_pages", group="full", state="owned") > 0
        # Leaving the block closed the connection mid-stream: the engine aborts the request.
    after = _wait_idle(http)
    # The request owns nothing now: what the engine owns is what the slots pin -- the stream's slot pins
    # what it computed before the client left (cached, as llama.cpp keeps a cancelled slot's KV).
    pinned = server.state.engine.call(lambda e: len({p for slot in server.state.slots.slots if slot.hold
                                                     for p in slot.hold.full_pages})).result(10)
    assert value(after, "kv_pages", group="full", state="owned") == pinned
    assert value(after, "tokens_predicted_total") - value(during, "tokens_predicted_total") < 300


def test_a_long_decode_slides_the_window_and_a_tool_call_opener_sets_an_anchor(server, http, no_eos):
    before = _wait_idle(http)
    r = http.post("/v1/completions", json={"prompt": "Slide", "max_tokens": 6 * WINDOW, "temperature": 0,
                                           "logit_bias": no_eos})
    assert r.status_code == 200
    mid = scrape(http)
    assert delta(before, mid, "window_pages_released_total") > 0
    assert delta(before, mid, "anchors_set_total") == 0

    opener = server.token_id("<tool_call>")
    r = http.post("/v1/completions", json={"prompt": "Call", "max_tokens": 3, "temperature": 0,
                                           "logit_bias": {**no_eos, str(opener): 100}})
    assert r.json()["choices"][0]["text"].startswith("<tool_call>")
    after = scrape(http)
    assert delta(mid, after, "anchors_set_total") == 1  # only the turn's first opener anchors
