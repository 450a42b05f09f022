"""Aggregate decode throughput of anchorage's engine against `generate`, no HTTP.

Same checkpoint (Qwen3-0.6B shape, random bf16 weights), same requests, in
one process: at concurrency 1, 8 and 32, N requests with mixed prompt and
output lengths (seeded) are submitted to anchorage's engine at once
(continuous batching, `max_num_seqs` 32) and their streams drained; the same
requests go to transformers' `generate` as one left-padded static batch of
N. Aggregate tokens/s counts only the tokens each request asked for, over
the wall time from submission to the last token. The two alternate per
repeat so machine noise hits both. Not a test: timings on a shared machine
are noisy.

    .venv/bin/python -m bench.throughput [--short] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from bench import hf_generate
from bench.checkpoints import qwen3_06b
from bench.vocab import full_vocab
from bench.workloads import FULL, SHORT, LoadSpec, load_requests, tokenizer


def engine_batch(engine, prompts: list[list[int]], outputs: list[int], tag: str) -> tuple[int, float]:
    """Submit every request at once, drain every stream (one thread each); (tokens, wall seconds)."""
    from scheduler.engine import EngineRequest
    from scheduler.sampling_params import SamplingParams

    counts = [0] * len(prompts)

    def drain(i, stream):
        for ev in stream:
            if ev.error:
                raise RuntimeError(ev.error)
            counts[i] += len(ev.token_ids)

    t0 = time.perf_counter()
    streams = [engine.submit(EngineRequest(f"{tag}-{i}", p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)))
               for i, (p, n) in enumerate(zip(prompts, outputs))]
    threads = [threading.Thread(target=drain, args=(i, s)) for i, s in enumerate(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if counts != outputs:
        raise RuntimeError(f"engine returned {counts} tokens, asked {outputs}")
    return sum(counts), wall


def specs(short: bool) -> list[LoadSpec]:
    sizes = SHORT if short else FULL
    one = LoadSpec("c1", "concurrency 1", 1, sizes.c8.prompt_range, sizes.c8.output_range, 1500)
    return [one, sizes.c8, sizes.c32]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    args = ap.parse_args(argv)
    from server.runtime import build_runtime
    from server.settings import ServeSettings

    repeats = args.repeats or (1 if args.short else 3)
    model = full_vocab(qwen3_06b())
    tok = tokenizer(model)
    _info, engine, *_ = build_runtime(ServeSettings(model=model, dtype="bfloat16", max_num_seqs=32, max_model_len=1024,
                                                       threads=args.threads))
    engine.start()
    ref = hf_generate.load(model)
    try:
        warm = [tok.encode("warm up the engine").ids]
        engine_batch(engine, warm, [4], "warm"), hf_generate.static_batch(ref, warm, [4])
        rows = []
        for spec in specs(args.short):
            ours, theirs = [], []
            for r in range(repeats):
                reqs = load_requests(model, spec, r)
                prompts, outs = [tok.encode(q.prompt).ids for q in reqs], [q.max_tokens for q in reqs]
                n, wall = engine_batch(engine, prompts, outs, f"{spec.name}-{r}")
                ours.append(n / wall)
                results, gwall = hf_generate.static_batch(ref, prompts, outs)
                theirs.append(sum(x.tokens for x in results) / gwall)
            rows.append((spec, statistics.median(ours), statistics.median(theirs), ours, theirs))
    finally:
        engine.shutdown()
    print(f"Qwen3-0.6B shape, bf16, greedy, EOS ignored; median of {repeats}; aggregate generated tokens/s")
    print("| concurrency | prompts | outputs | anchorage engine | generate (static batch) | ratio |")
    print("|---:|---|---|---:|---:|---:|")
    for spec, a, b, ours, theirs in rows:
        print(f"| {spec.streams} | {spec.prompt_range[0]}-{spec.prompt_range[1]} | {spec.output_range[0]}-"
              f"{spec.output_range[1]} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
    for spec, _a, _b, ours, theirs in rows:
        print(f"runs c{spec.streams}: anchorage {[round(x, 2) for x in ours]}  generate {[round(x, 2) for x in theirs]}")


if __name__ == "__main__":
    main()
