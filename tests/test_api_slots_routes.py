"""llama.cpp's slot routes against live servers: the refusals, and one save/restore round trip.

`GET /slots` and `POST /slots/{id}?action=save|restore|erase` with a JSON
`{"filename": ...}`. Without `--slot-save-path` every action is a 501 naming
the flag; with it, a bad id is a 400 (not an integer, negative) or a 404
(beyond `--parallel`), an unknown action a 400, a missing body a 400 naming
`filename` (llama.cpp answers 500), and a file name that could leave the
directory a 400 -- checked before anything touches the disk.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from engine_samplers import SlowSampler, swapped
from live_server import live_server
from slots import fslot

PARALLEL = 2


@pytest.fixture(scope="module")
def nosave(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3"), parallel=PARALLEL) as s:
        yield s


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("outside") / "slots"


@pytest.fixture(scope="module")
def saving(tiny_checkpoint, slot_dir):
    slot_dir.mkdir()
    with live_server(tiny_checkpoint("qwen3"), parallel=PARALLEL, slot_save_path=slot_dir) as s:
        yield s


def _action(server, slot: str, action: str | None, body=None, raw: bytes | None = None) -> httpx.Response:
    query = "" if action is None else f"?action={action}"
    kwargs = {"content": raw, "headers": {"content-type": "application/json"}} if raw is not None else {"json": body}
    return httpx.post(f"{server.base_url}/slots/{slot}{query}", timeout=60, **kwargs)


def _error(r: httpx.Response, status: int, type_: str, param: str | None, *words: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == type_, err
    assert err["param"] == param, err
    for word in words:
        assert word in err["message"], err
    return err


def test_the_slot_list_has_one_idle_entry_per_parallel_slot(nosave):
    r = httpx.get(nosave.base_url + "/slots", timeout=30)
    assert r.status_code == 200
    slots = r.json()
    assert [s["id"] for s in slots] == list(range(PARALLEL))
    assert all(s["n_ctx"] == nosave.state.info.max_model_len and s["is_processing"] is False for s in slots)


@pytest.mark.parametrize("action", ["save", "restore", "erase"])
def test_without_a_slot_save_path_every_action_is_a_501_naming_the_flag(nosave, action):
    r = _action(nosave, "0", action, {"filename": "a.fslot"})
    _error(r, 501, "not_supported_error", "action", "--slot-save-path")


@pytest.mark.parametrize("slot, status, type_, words", [
    ("abc", 400, "invalid_request_error", ("Invalid slot ID", "abc")),
    ("1.5", 400, "invalid_request_error", ("Invalid slot ID",)),
    ("-1", 400, "invalid_request_error", ("Invalid slot ID", "negative")),
    (str(PARALLEL), 404, "not_found_error", (f"slot {PARALLEL}", "--parallel")),
    ("99999999999999999999", 404, "not_found_error", ("--parallel",)),
    ("+1", 400, "invalid_request_error", ("Invalid slot ID",)),
    ("1_0", 400, "invalid_request_error", ("Invalid slot ID",)),
    ("\u0663", 400, "invalid_request_error", ("Invalid slot ID",)),
    ("9" * 5000, 404, "not_found_error", ("--parallel",)),
    ("0" * 4300 + "9", 404, "not_found_error", ("--parallel",)),
], ids=["not a number", "a fraction", "negative", "one past the last", "huge", "a plus sign", "an underscore",
        "an Arabic-Indic digit", "more digits than int() takes", "a small number behind 4300 zeros"])
def test_a_bad_slot_id_is_refused(saving, slot, status, type_, words):
    _error(_action(saving, slot, "save", {"filename": "a.fslot"}), status, type_, "id_slot", *words)


@pytest.mark.parametrize("action", ["explode", "SAVE"])
def test_an_unknown_action_is_a_400_naming_it(saving, action):
    _error(_action(saving, "0", action, {"filename": "a.fslot"}), 400, "invalid_request_error", "action",
           "save, restore or erase", repr(action))


def test_a_missing_action_is_a_400_that_says_it_is_missing(saving):
    err = _error(_action(saving, "0", None, {"filename": "a.fslot"}), 400, "invalid_request_error", "action",
                 "missing", "save, restore or erase")
    assert "None" not in err["message"]


@pytest.mark.parametrize("action", ["save", "restore"])
def test_a_misspelt_field_in_the_body_is_a_400_naming_it(saving, action):
    _error(_action(saving, "0", action, {"filename": "a.fslot", "filname": "b.fslot"}), 400,
           "invalid_request_error", "filname", "unknown field")


@pytest.mark.parametrize("action", ["save", "restore"])
@pytest.mark.parametrize("body, raw, words", [
    (None, b"", ("filename",)),
    ({}, None, ("filename",)),
    ({"name": "a.fslot"}, None, ("filename",)),
    (["a.fslot"], None, ("filename",)),
    ({"filename": 5}, None, ("filename", "string")),
    (None, b'{"filename": ', ("JSON",)),
    (None, b'{"filename": "\xff"}', ("JSON", "UTF-8")),
    (None, b'{"filename": "a.fslot", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", ("JSON", "nests")),
    (None, b'{"filename": "\\ud800.fslot"}', ("filename", "Unicode")),
    (None, b'{"filename": "a.fslot", "n": ' + b"9" * 5000 + b"}", ("JSON",)),
], ids=["no body", "empty object", "other key", "a list", "not a string", "malformed JSON", "not UTF-8",
        "nested too deep", "a lone surrogate", "an integer past the parser's limit"])
def test_a_missing_or_malformed_body_is_a_400_naming_filename(saving, action, body, raw, words):
    r = _action(saving, "0", action, body, raw)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] in ("filename", None)  # malformed JSON is about the body, not a field
    for word in words:
        assert word in err["message"]


BAD_NAMES = {
    "parent traversal": "../escape.fslot",
    "deep traversal": "../../../../tmp/escape.fslot",
    "subdirectory": "sub/a.fslot",
    "absolute path": "/tmp/escape.fslot",
    "backslash": "..\\escape.fslot",
    "dot dot": "..",
    "dot": ".",
    "empty": "",
    "double dot inside": "a..b.fslot",
    "colon": "c:a.fslot",
    "NUL byte": "a\x00b.fslot",
    "newline": "a\nb.fslot",
    "trailing dot": "a.fslot.",
    "leading space": " a.fslot",
    "fullwidth dots": "\uff0e\uff0e",
    "division slash": "x\u2215y.fslot",
    "too long": "a" * 300 + ".fslot",
}


@pytest.mark.parametrize("action", ["save", "restore"])
@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_a_filename_that_could_leave_the_directory_or_hide_is_a_400(saving, slot_dir, action, name):
    err = _error(_action(saving, "0", action, {"filename": name}), 400, "invalid_request_error", "filename",
                 "invalid slot filename: ")
    assert err["message"].count("invalid") == 1, "the reason is stated once"
    assert not (slot_dir.parent / "escape.fslot").exists()
    assert sorted(p.name for p in slot_dir.parent.iterdir()) == ["slots"]


def test_restoring_a_file_that_does_not_exist_is_a_404_naming_it(saving):
    _error(_action(saving, "0", "restore", {"filename": "never-saved.fslot"}), 404, "not_found_error", "filename",
           "never-saved.fslot")


def test_restoring_a_file_that_is_not_a_slot_file_says_which_check_failed(saving, slot_dir):
    (slot_dir / "garbage.fslot").write_bytes(b"this is not a slot file at all" * 4)
    err = _error(_action(saving, "0", "restore", {"filename": "garbage.fslot"}), 400, "invalid_request_error",
                 "filename", "refused", "magic")
    assert err["code"] == "magic"


def test_saving_an_empty_slot_is_a_400(saving):
    assert _action(saving, "1", "erase").status_code == 200
    _error(_action(saving, "1", "save", {"filename": "empty.fslot"}), 400, "invalid_request_error", "id_slot",
           "no cached tokens")


def _slot(server, slot_id: int) -> dict:
    return httpx.get(server.base_url + "/slots", timeout=30).json()[slot_id]


def test_saving_over_a_directory_is_a_409_naming_filename(saving, slot_dir):
    (slot_dir / "folder.fslot").mkdir(exist_ok=True)
    r = _action(saving, "0", "save", {"filename": "folder.fslot"})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["param"] == "filename" and "directory" in r.json()["error"]["message"]


def test_a_saved_slot_restores_into_another_slot_with_the_same_tokens(saving, slot_dir):
    prompt = "Remember: " + " ".join(uuid.uuid4().hex[:8] for _ in range(30))
    r = httpx.post(saving.base_url + "/v1/completions", timeout=60,
                   json={"prompt": prompt, "max_tokens": 3, "temperature": 0, "id_slot": 0})
    assert r.status_code == 200, r.text
    held = _slot(saving, 0)["n_cached_tokens"]
    assert held >= 2 * saving.state.info.page_size

    saved = _action(saving, "0", "save", {"filename": "conversation.fslot"}).json()
    assert saved["id_slot"] == 0 and saved["filename"] == "conversation.fslot"
    assert saved["n_saved"] == held
    assert saved["n_written"] == (slot_dir / "conversation.fslot").stat().st_size > 0

    erased = _action(saving, "1", "erase").json()
    assert erased == {"id_slot": 1, "n_erased": erased["n_erased"]}
    assert _slot(saving, 1)["n_cached_tokens"] == 0

    restored = _action(saving, "1", "restore", {"filename": "conversation.fslot"})
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert body["id_slot"] == 1 and body["n_restored"] == held
    assert body["n_read"] == saved["n_written"]
    assert _slot(saving, 1)["n_cached_tokens"] == held

    # The next request with that prompt starts from the restored prefix.
    again = httpx.post(saving.base_url + "/v1/completions", timeout=60,
                       json={"prompt": prompt, "max_tokens": 3, "temperature": 0, "id_slot": 1}).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= held - saving.state.info.page_size
    assert again["choices"][0]["text"] == r.json()["choices"][0]["text"]

    assert _action(saving, "0", "erase").json() == {"id_slot": 0, "n_erased": held}
    assert _slot(saving, 0)["n_cached_tokens"] == 0


def test_a_well_formed_file_with_impossible_contents_is_refused_though_its_digest_matches(saving, slot_dir):
    # The digest is a checksum anyone can recompute: a file re-encoded after tampering passes it.
    prompt = "Tamper: " + " ".join(uuid.uuid4().hex[:8] for _ in range(30))
    r = httpx.post(saving.base_url + "/v1/completions", timeout=60,
                   json={"prompt": prompt, "max_tokens": 2, "temperature": 0, "id_slot": 0})
    assert r.status_code == 200, r.text
    assert _action(saving, "0", "save", {"filename": "honest.fslot"}).status_code == 200
    assert _action(saving, "1", "erase").status_code == 200
    slot = fslot.decode((slot_dir / "honest.fslot").read_bytes())
    payload = slot.verify(slot.identity)
    vocab = saving.state.info.spec.vocab_size

    def tampered(name: str, **change) -> dict:
        (slot_dir / name).write_bytes(fslot.encode(slot.identity, dataclasses.replace(payload, **change)))
        return _error(_action(saving, "1", "restore", {"filename": name}), 400, "invalid_request_error", "filename")

    tokens = payload.tokens.copy()
    tokens[3] = vocab + 7
    assert str(vocab + 7) in tampered("token.fslot", tokens=tokens)["message"]
    poisoned = [fslot.LayerKV(layer.k.copy(), layer.v.copy(), layer.first_held) for layer in payload.layers]
    poisoned[-1].v[0] = poisoned[-1].v.dtype.type(0x7FC0) if poisoned[-1].v.dtype.kind == "u" else np.nan
    assert "NaN or infinite" in tampered("nan.fslot", layers=poisoned)["message"]
    # A full-attention layer holding only a suffix: installed, its first rows would be stale page contents.
    cut = [fslot.LayerKV(layer.k[16:].copy(), layer.v[16:].copy(), 16) if i == 0 else layer
           for i, layer in enumerate(payload.layers)]
    assert saving.state.info.spec.layer_types[0] == "full_attention"
    assert "full-attention layer" in tampered("suffix.fslot", layers=cut)["message"]
    assert _slot(saving, 1)["n_cached_tokens"] == 0  # nothing was installed
    assert _action(saving, "1", "restore", {"filename": "honest.fslot"}).status_code == 200


def test_many_actions_queued_on_one_slot_hold_no_thread_and_never_stall_another_slot(saving):
    # Each waiting action used to block a worker thread for its whole wait; ten of them filled the pool
    # the action holding the slot needed to write its file, and everything stalled to the 30 s timeout.
    r = httpx.post(saving.base_url + "/v1/completions", timeout=60,
                   json={"prompt": "Queue: " + uuid.uuid4().hex, "max_tokens": 2, "temperature": 0, "id_slot": 0})
    assert r.status_code == 200, r.text

    def act(slot: str, action: str, name: str | None) -> int:
        query = f"{saving.base_url}/slots/{slot}?action={action}"
        return httpx.post(query, json={"filename": name} if name else None, timeout=25).status_code

    with ThreadPoolExecutor(12) as pool:
        saves = [pool.submit(act, "0", "save", f"queued{i}.fslot") for i in range(10)]
        other = pool.submit(act, "1", "erase", None)
        assert [f.result() for f in saves] == [200] * 10  # a 409 or a client timeout is the stall
        assert other.result() == 200


def test_a_request_naming_a_busy_slot_waits_for_it_and_the_slot_then_holds_its_tokens(saving):
    def complete(prompt: str, max_tokens: int) -> dict:
        r = httpx.post(saving.base_url + "/v1/completions", timeout=60, json={
            "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "id_slot": 0})
        assert r.status_code == 200, r.text
        return r.json()

    # The first request decodes for two seconds or more (100 steps of 20 ms) when the second arrives.
    with swapped(saving.state.engine, lambda real: SlowSampler(real, delay=0.02)), ThreadPoolExecutor(2) as pool:
        first = pool.submit(complete, "First: " + uuid.uuid4().hex, 100)
        deadline = time.monotonic() + 30  # until the first holds slot 0 (a fixed sleep raced a loaded machine)
        while not _slot(saving, 0)["is_processing"]:
            assert time.monotonic() < deadline and not first.done(), "the first request never took slot 0"
            time.sleep(0.02)
        second = pool.submit(complete, "Second, longer: " + " ".join(uuid.uuid4().hex for _ in range(4)), 2)
        first, second = first.result(), second.result()
    assert first["usage"]["prompt_tokens"] != second["usage"]["prompt_tokens"]
    # The second ran in slot 0 after the first (it used to run slot-less, leaving the first's tokens there).
    assert _slot(saving, 0)["n_prompt_tokens"] == second["usage"]["prompt_tokens"]


def test_a_client_that_hangs_up_mid_body_is_no_server_error(saving, caplog):
    caplog.set_level(logging.INFO)
    host, port = saving.base_url.split("//")[1].split(":")
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(b"POST /slots/0?action=save HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"filen")
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any("disconnected" in r.getMessage() for r in caplog.records):
        time.sleep(0.05)
    assert any("disconnected before its body arrived" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a hang-up was logged as a server error"
