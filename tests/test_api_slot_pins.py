"""Idle slots' pins give way when a request needs the pool, over HTTP.

Each of `--parallel` slots pins its last request's KV so the conversation can
come back (or be saved). With a small pool, two idle slots pinned nearly all
of it and the third request waited forever for room nothing would free; now
the oldest pin gives way, the slot's cache is gone (`n_cached_tokens` 0), and
/metrics counts it.
"""

from __future__ import annotations

import random

import httpx
import pytest

from live_server import live_server


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    with live_server(tiny_checkpoint("qwen3"), parallel=4, max_model_len=512, kv_cache_tokens=1024,
                     slot_save_path=str(tmp_path_factory.mktemp("slots"))) as s:
        yield s


def _complete(server, prompt: list[int], **extra) -> None:
    r = httpx.post(server.base_url + "/v1/completions",
                   json={"prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}, timeout=60)
    assert r.status_code == 200, r.text


def _cached(server) -> list[int]:
    return [s["n_cached_tokens"] for s in httpx.get(server.base_url + "/slots", timeout=10).json()]


def _prompt(rng: random.Random, n_tokens: int) -> list[int]:
    return [rng.randrange(30, 400) for _ in range(n_tokens)]


def test_requests_run_when_idle_slots_pin_most_of_the_pool(server):
    rng = random.Random(0)
    cached = []
    for _ in range(5):  # ~450 tokens each: the pool holds two such pins and little else
        _complete(server, _prompt(rng, 440))
        cached.append(_cached(server))
    assert sum(1 for n in cached[-1] if n) < 4, f"every slot still pins its request: {cached}"
    assert any(n > 0 for n in cached[-1]), "the latest request's slot keeps its pin"
    metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
    released = [line for line in metrics.splitlines() if line.startswith("anchorage:slot_pins_released_total")]
    assert released and float(released[0].split()[-1]) >= 1, released


def test_a_restore_makes_room_by_releasing_other_slots_pins(server):
    rng = random.Random(1)
    _complete(server, _prompt(rng, 440), id_slot=0)
    saved = httpx.post(server.base_url + "/slots/0?action=save", json={"filename": "big.fslot"}, timeout=60)
    assert saved.status_code == 200, saved.text
    for slot in (1, 2):  # two more pins of ~450 tokens: the pool (64 pages) cannot also take a 28-page restore
        _complete(server, _prompt(rng, 440), id_slot=slot)
    assert _cached(server)[1] and _cached(server)[2]
    restored = httpx.post(server.base_url + "/slots/3?action=restore", json={"filename": "big.fslot"}, timeout=60)
    assert restored.status_code == 200, restored.text
    after = _cached(server)
    assert after[3] == saved.json()["n_saved"] // 16 * 16 and after[2], after


def test_saving_a_slot_whose_pin_gave_way_says_so(server):
    rng = random.Random(2)
    for slot in (0, 1, 2):  # slot 0's pin is the oldest when slot 2's request needs room
        _complete(server, _prompt(rng, 440), id_slot=slot)
    assert _cached(server)[0] == 0
    r = httpx.post(server.base_url + "/slots/0?action=save", json={"filename": "gone.fslot"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "id_slot" and "gave up its cached KV" in err["message"], err
