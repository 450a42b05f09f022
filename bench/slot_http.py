"""Slot restore against prefill for a long prefix, through llama.cpp's slot API.

Both anchorage and llama.cpp's server speak `POST /slots/{id}?action=save|
restore` with `{"filename": ...}`. Per repeat and peer:

1. fresh server with one slot: warm up, then send the prefix (a fresh
   seeded prompt of `prefix` tokens, 1 new token, `id_slot` 0) -- the time to
   its first token is the prefill;
2. save slot 0 to a file;
3. a second fresh server (nothing cached in memory): restore the file into
   slot 0, then send the prefix plus a few new words in slot 0 and time its
   first token and read back how much of it the server reports as cached.

Save and restore are timed on the client around the HTTP call. Not for:
in-process slot I/O throughput (that is the slot issue's own script).
"""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from bench.checkpoints import WORK
from bench.loadgen import run_concurrent
from bench.peers import Peer, Profile
from bench.venvs import PeerUnavailable
from bench.workloads import make_prompt

SEED = 5000


def _one(base: str, payload: dict):
    res, _ = asyncio.run(run_concurrent(base, "/v1/completions", [payload]))
    if res[0].error:
        raise PeerUnavailable(f"request failed: {res[0].error}")
    return res[0]


def _slot(base: str, action: str, filename: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = httpx.post(f"{base}/slots/0", params={"action": action}, json={"filename": filename}, timeout=1800.0)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise PeerUnavailable(f"slot {action} answered {r.status_code}: {r.text[:300]}")
    return r.json(), dt


def run(peer: Peer, model_dir, prefix: int, repeat: int, threads: int) -> dict:
    rng = random.Random(SEED + repeat)
    text, n = make_prompt(model_dir, prefix, rng)
    tail, _ = make_prompt(model_dir, 8, rng)
    warm, _ = make_prompt(model_dir, 8, rng)
    folder = WORK / "slots" / peer.name.replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    filename = f"bench-{repeat}.bin"
    (folder / filename).unlink(missing_ok=True)
    profile = Profile(max_seqs=1, ctx_per_seq=prefix + 256, slot_dir=folder, threads=threads)
    with peer.server(model_dir, profile) as base:
        _one(base, peer.payload(warm, 1))
        cold = _one(base, peer.payload(text, 1, id_slot=0))
        saved, save_s = _slot(base, "save", filename)
    size = (folder / filename).stat().st_size
    with peer.server(model_dir, profile) as base:
        _one(base, peer.payload(warm, 1, id_slot=0))
        restored, restore_s = _slot(base, "restore", filename)
        after = _one(base, peer.payload(text + tail, 1, id_slot=0))
    (folder / filename).unlink(missing_ok=True)
    return {
        "prefix_tokens": n,
        "prefill_s": cold.ttft,
        "save_s": save_s,
        "restore_s": restore_s,
        "ttft_after_restore_s": after.ttft,
        "speedup": cold.ttft / restore_s if restore_s else None,
        "cached_after": after.cached_tokens,
        "n_restored": restored.get("n_restored"),
        "file_bytes": size,
    }
