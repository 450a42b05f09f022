"""Where an engine step's time goes: Python phases and torch operators.

Runs anchorage's engine in-process on the benchmark checkpoint without its
thread -- this script calls `engine.step()` itself -- so one profiler sees
the whole loop: scheduling, the model runner, sampling, detokenizing. It
submits `--streams` requests (prompt `--prompt`, `--new-tokens` each, greedy,
EOS ignored), drives them to the end under cProfile and torch.profiler, and
prints (1) the time per phase of the step, (2) the heaviest Python functions
and (3) the heaviest torch operators. This is the "profile of the hot loop"
a benchmark note cites when anchorage is behind a peer.

    .venv/bin/python -m bench.profile_step [--streams 1] [--new-tokens 32] [--threads N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

PHASES = [
    ("schedule", "batch_scheduler.py", "schedule"),
    ("model runner step", "model_runner.py", "step"),
    ("  of which attention planning", "paged_attention.py", "plan_group"),
    ("sample", "sampler.py", "sample"),
    ("detokenize", "detokenizer.py", "add"),
    ("after_step / on_sampled", "batch_scheduler.py", "on_sampled"),
]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.checkpoints import qwen3_06b
    from bench.vocab import full_vocab
    from scheduler.engine import EngineRequest
    from scheduler.sampling_params import SamplingParams
    from server.runtime import build_runtime
    from server.settings import ServeSettings

    model = full_vocab(qwen3_06b())
    _info, engine, tok, *_ = build_runtime(ServeSettings(model=model, dtype="bfloat16", max_num_seqs=max(1, args.streams),
                                                         max_model_len=args.prompt + args.new_tokens + 64,
                                                         threads=args.threads))

    def run(tag: str, new_tokens: int) -> int:
        streams = [engine.submit(EngineRequest(f"{tag}-{i}", list(range(1000 + i, 1000 + i + args.prompt)),
                                               SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)))
                   for i in range(args.streams)]
        steps = 0
        engine._drain_commands()  # the engine thread is not running: deliver the submissions here
        while engine.scheduler.has_work():
            engine.step()
            steps += 1
        for s in streams:
            for _ in s:
                pass
        return steps

    run("warm", 4)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as tprof:
        prof.enable()
        steps = run("prof", args.new_tokens)
        prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    print(f"{args.streams} stream(s), prompt {args.prompt}, {args.new_tokens} new tokens: {steps} steps in {wall:.2f}s "
          f"({args.streams * args.new_tokens / wall:.2f} tok/s under both profilers; torch threads {torch.get_num_threads()})")
    print("\nphase                          total s   share")
    for label, file, func in PHASES:
        total = sum(v[3] for k, v in stats.stats.items() if k[0].endswith(file) and k[2] == func)
        print(f"{label:30s} {total:8.2f}  {total / wall:6.1%}")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    print("\nPython functions by own time:\n" + "\n".join(out.getvalue().splitlines()[6:]))
    print("torch operators by own CPU time:")
    print(tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
