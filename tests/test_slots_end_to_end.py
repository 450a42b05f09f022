"""Slots across processes (issue 6 acceptance).

One `anchorage serve` process runs a request in slot 0, saves the slot, and
continues the conversation: that continuation is the uninterrupted run. A
second, fresh process of the same checkpoint restores the file and continues
the same conversation: its greedy tokens must be identical, and the follow-up
request must report the restored prefix as cached. Done for a plain model
(format v1 file) and a windowed one (v2: windowed layers hold a suffix).
"""

from __future__ import annotations

import httpx
import pytest

from server.child_process import serve_child

pytestmark = pytest.mark.slow


def serve_process(model, slot_dir, *extra):
    return serve_child(["--model", str(model), "--dtype", "float32", "--slot-save-path", str(slot_dir),
                        "--parallel", "2", "--log-level", "warning", *extra], start_timeout_s=90)


def complete(base, prompt, n, **extra):
    r = httpx.post(base + "/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "return_token_ids": True, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["token_ids"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("window", [None, 32])
def test_a_slot_restored_in_a_fresh_process_continues_exactly_like_the_uninterrupted_run(tiny_checkpoint, tmp_path,
                                                                                       window):
    model = tiny_checkpoint("qwen3", sliding_window=window, layers=3) if window else tiny_checkpoint("qwen3")
    prompt = [(13 * j) % 400 + 30 for j in range(150)]
    with serve_process(model, tmp_path) as base:
        out1, _ = complete(base, prompt, 20, id_slot=0)
        saved = httpx.post(base + "/slots/0?action=save", json={"filename": "conv.fslot"}, timeout=60).json()
        follow = prompt + out1 + [77, 78, 79]
        reference, cached_ref = complete(base, follow, 12)
    assert saved["n_saved"] == ((150 + 20 - 1) // 16) * 16 and saved["n_written"] > 0
    assert (tmp_path / "conv.fslot").stat().st_size == saved["n_written"]

    with serve_process(model, tmp_path) as base:
        restored = httpx.post(base + "/slots/1?action=restore", json={"filename": "conv.fslot"}, timeout=60).json()
        assert restored["n_restored"] == saved["n_saved"], restored
        assert restored["n_read"] == saved["n_written"]
        slots = httpx.get(base + "/slots", timeout=10).json()
        assert slots[1]["n_cached_tokens"] == saved["n_saved"]
        continued, cached = complete(base, follow, 12)
    assert cached == saved["n_saved"], "the follow-up must report the restored prefix as cached"
    assert continued == reference, "a restored slot must continue exactly like the uninterrupted run"


def test_a_windowed_slot_restored_at_a_page_size_no_continuation_can_reuse_is_refused(tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("qwen3", sliding_window=32, layers=3)
    prompt = [(13 * j) % 400 + 30 for j in range(150)]
    # Page 16: 160 tokens saved, the window from 96 (where the prompt's prefill slid it to; the pool still
    # held the rest when the slot was saved).
    with serve_process(model, tmp_path) as base:
        out, _ = complete(base, prompt, 20, id_slot=0)
        assert httpx.post(base + "/slots/0?action=save", json={"filename": "conv.fslot"}, timeout=60).status_code == 200
    with serve_process(model, tmp_path, "--page-size", "64") as base:  # 128 tokens need the window from 64
        r = httpx.post(base + "/slots/1?action=restore", json={"filename": "conv.fslot"}, timeout=60)
        assert r.status_code == 400 and "page size" in r.json()["error"]["message"], r.text
        assert httpx.get(base + "/slots", timeout=10).json()[1]["n_cached_tokens"] == 0
    with serve_process(model, tmp_path, "--page-size", "8") as base:  # a page size that can reuse it
        r = httpx.post(base + "/slots/1?action=restore", json={"filename": "conv.fslot"}, timeout=60)
        assert r.status_code == 200, r.text
        _, cached = complete(base, prompt + out + [77], 2)
        assert cached == 160, "the continuation reuses all the restored tokens"


def test_a_windowed_slot_restored_elsewhere_is_rejoined_before_its_end_as_where_it_was_saved(tiny_checkpoint,
                                                                                                tmp_path):
    # The next turn rejoins 5 tokens before the saved end (a re-rendered thought does so in an agent loop):
    # reusing 144 tokens needs the windowed layers from 113, before the last window (from 128) -- the file
    # must hold what the saving server's pool held, and the restore must install it.
    model = tiny_checkpoint("qwen3", sliding_window=32, layers=3)
    prompt = [(13 * j) % 400 + 30 for j in range(150)]
    with serve_process(model, tmp_path) as base:
        out, _ = complete(base, prompt, 20, id_slot=0)
        assert httpx.post(base + "/slots/0?action=save", json={"filename": "conv.fslot"}, timeout=60).status_code == 200
        follow = (prompt + out)[:155] + [77, 78, 79]
        reference, cached_live = complete(base, follow, 8)
    assert cached_live == 144
    with serve_process(model, tmp_path) as base:
        r = httpx.post(base + "/slots/1?action=restore", json={"filename": "conv.fslot"}, timeout=60)
        assert r.status_code == 200 and r.json()["n_restored"] == 160, r.text
        continued, cached = complete(base, follow, 8)
    assert cached == cached_live, "the restored slot must be rejoined where the saving server's was"
    assert continued == reference


def test_a_slot_from_another_checkpoint_is_refused_naming_the_fingerprint(tiny_checkpoint, tmp_path):
    a = tiny_checkpoint("qwen3", seed=0)
    b = tiny_checkpoint("qwen3", seed=1)
    with serve_process(a, tmp_path) as base:
        complete(base, [(5 * j) % 400 + 30 for j in range(64)], 4, id_slot=0)
        assert httpx.post(base + "/slots/0?action=save", json={"filename": "a.fslot"}, timeout=60).status_code == 200
    with serve_process(b, tmp_path) as base:
        r = httpx.post(base + "/slots/0?action=restore", json={"filename": "a.fslot"}, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "checkpoint" in err["message"] and err["code"] == "identity_checkpoint"
