"""Slot restore against recomputing the prefill, and save / restore against a plain read.

On the Qwen3-0.6B-shaped bf16 checkpoint, in one process:
1. prefill a P-token prompt through the engine (the cost a restore avoids);
2. save the slot holding it (written straight out of its pages, atomically);
3. erase, then restore the file (streamed into pages, checked and hashed as it arrives);
4. read the same file sequentially into memory (the disk/page-cache floor).
Prints milliseconds, throughputs and the ratio prefill / restore.

    .venv/bin/python -m bench.slot_restore [--tokens 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.checkpoints import qwen3_06b
from scheduler.engine import EngineRequest
from scheduler.sampling_params import SamplingParams
from server.runtime import build_runtime
from server.settings import ServeSettings
from slots.identity import serving_identity
from slots.slot_io import restore_file, save_file
from slots.slot_table import SlotTable


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    path = qwen3_06b()
    s = ServeSettings(model=path, dtype="bfloat16", max_model_len=args.tokens + 64,
                      kv_cache_tokens=3 * args.tokens + 256, max_batched_tokens=512)
    info, engine, tok, runner, _ = build_runtime(s)
    engine.start()
    table = SlotTable(2, engine.scheduler.alloc, info.max_model_len)
    engine.on_end.append(table.on_end)
    spec = info.spec
    ident = serving_identity(spec, runner.kv_dtype_name, path)
    prefill_ms, save_ms, restore_ms, read_ms = [], [], [], []
    workdir = Path(tempfile.mkdtemp(prefix="slotbench-"))
    size = 0
    for r in range(args.repeats):
        prompt = [(r * 7919 + 31 * j) % 150000 + 100 for j in range(args.tokens)]
        t0 = time.perf_counter()
        list(engine.submit(EngineRequest(f"p{r}", prompt, SamplingParams(max_tokens=1, temperature=0), slot_id=0)))
        prefill_ms.append((time.perf_counter() - t0) * 1000)
        slot = table.slots[0]

        t0 = time.perf_counter()
        _, size = save_file(workdir / "s.fslot", ident, runner, lambda fn: engine.call(fn).result(), slot)
        save_ms.append((time.perf_counter() - t0) * 1000)
        # Forget the slot and every cached page, so the restore really installs.
        engine.call(lambda e: (table.unpin(slot), e.scheduler.alloc.cache.clear())).result()

        t0 = time.perf_counter()
        restore_file(workdir / "s.fslot", ident, runner, lambda fn: engine.call(fn).result(),
                     lambda tokens: table.pin(slot, tokens), window=spec.sliding_window, max_bytes=1 << 40)
        restore_ms.append((time.perf_counter() - t0) * 1000)
        engine.call(lambda e: (table.unpin(slot), e.scheduler.alloc.cache.clear())).result()

        t0 = time.perf_counter()
        with open(workdir / "s.fslot", "rb") as f:
            buf = bytearray(size)
            f.readinto(buf)
        read_ms.append((time.perf_counter() - t0) * 1000)
        del buf
    engine.shutdown()
    m = {k: statistics.median(v) for k, v in
         dict(prefill=prefill_ms, save=save_ms, restore=restore_ms, read=read_ms).items()}
    mb = size / 2**20
    print(f"Qwen3-0.6B shape, bf16, {args.tokens}-token slot ({mb:.0f} MiB file), median of {args.repeats}")
    print("| operation | ms | MiB/s |")
    print("|---|---|---|")
    print(f"| prefill {args.tokens} tokens | {m['prefill']:.0f} | |")
    print(f"| save (pages to an atomic file) | {m['save']:.0f} | {mb / m['save'] * 1000:.0f} |")
    print(f"| restore (stream into pages + verify) | {m['restore']:.0f} | {mb / m['restore'] * 1000:.0f} |")
    print(f"| plain sequential read | {m['read']:.0f} | {mb / m['read'] * 1000:.0f} |")
    print(f"restore is {m['prefill'] / m['restore']:.1f}x faster than prefill; "
          f"restore runs at {m['read'] / m['restore']:.2f} of plain-read speed")


if __name__ == "__main__":
    main()
