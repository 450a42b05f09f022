"""A multi-turn agent trace on a windowed checkpoint: anchors on against anchors off.

Each turn is what an agent harness sees: the model thinks for `think`
tokens, opens a tool call (`<tool_call>`, the anchor token), writes `args`
tokens of arguments, and stops; the harness sends the conversation back as
the previous prompt + the generated tokens up to and including the opener +
`result` tokens of tool output. The next prompt therefore agrees with the
last request up to the opener and diverges after it -- the case anchors are
for. Per turn we record the prompt tokens the engine computed (prompt minus
`cached_tokens`) and the time to first token.

A random-weight model never opens a tool call by itself, so the turn's
tokens are scripted: a logit processor (the sampler's `forced_token`
protocol) makes the model emit a fixed, seeded sequence with the opener at
step `think`. The model still runs every step; only the choice of token is
fixed, which also makes both runs see byte-identical prompts. The engine
runs in-process (`server.runtime.build_runtime`), once per setting.

    .venv/bin/python -m bench.agent_trace [--short]

Not for: the HTTP peers (bench.run calls `run_trace` for its agent table).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from dataclasses import dataclass

from bench.checkpoints import qwen3_06b
from bench.vocab import full_vocab


@dataclass
class TraceSpec:
    turns: int
    think: int
    args: int
    result: int
    system: int
    window: int
    interval: int
    seed: int = 4000


# Sizes chosen so the trace exercises what anchors are for: `think` longer
# than window + page (the anchor's window is not the prompt end's, which is
# kept live anyway); `args` long enough that a slide (every `interval` decode
# steps) passes the opener, and shorter than the drift at which the engine
# drops an anchor (window + page + 1 tokens past it).
# FULL keeps the short trace's window (and so its checkpoint) and runs the
# issue's ten turns: about ten minutes for both settings on 2 cores.
FULL = TraceSpec(turns=10, think=56, args=40, result=16, system=64, window=32, interval=16)
SHORT = TraceSpec(turns=3, think=48, args=40, result=8, system=32, window=32, interval=16)


@dataclass
class Turn:
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    total_s: float

    @property
    def computed(self) -> int:
        return self.prompt_tokens - self.cached_tokens


class Scripted:
    """Logit processor that makes the sampler emit `tokens` in order, then nothing more."""

    def __init__(self, tokens: list[int]):
        self.tokens, self.i = tokens, 0

    def forced_token(self) -> int | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def accept(self, token: int) -> None:
        self.i += 1


def scripts(spec: TraceSpec, opener: int, words: list[int]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(first prompt, each turn's generated tokens, each turn's tool result), from the seed."""
    rng = random.Random(spec.seed)
    pick = lambda n: [rng.choice(words) for _ in range(n)]  # noqa: E731
    system = pick(spec.system)
    gens = [pick(spec.think) + [opener] + pick(spec.args) for _ in range(spec.turns)]
    results = [pick(spec.result) for _ in range(spec.turns)]
    return system, gens, results


def run_trace(model_dir, spec: TraceSpec, anchors: bool, threads: int | None = None) -> list[Turn]:
    from scheduler.engine import EngineRequest
    from scheduler.sampling_params import SamplingParams
    from server.runtime import build_runtime
    from server.settings import ServeSettings

    settings = ServeSettings(model=model_dir, dtype="bfloat16", max_num_seqs=4, anchors=anchors, threads=threads,
                             swa_eviction_interval=spec.interval,
                             max_model_len=spec.system + spec.turns * (spec.think + spec.args + spec.result + 2) + 64)
    info, engine, tokenizer, _runner, _tb = build_runtime(settings)
    if info.anchor_token is None:
        raise RuntimeError(f"no anchor token for {model_dir}: {info.anchor_line}")
    words = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).strip().isalpha()][:400]
    system, gens, results = scripts(spec, info.anchor_token, words)
    script_for: dict[str, list[int]] = {}
    base_factory = engine.processor_factory
    engine.processor_factory = lambda seq: base_factory(seq) + [Scripted(script_for[seq.request_id])]
    engine.start()
    turns, prompt = [], list(system)
    try:
        for k, (gen, result) in enumerate(zip(gens, results)):
            rid = f"turn-{k}"
            script_for[rid] = gen
            params = SamplingParams(max_tokens=len(gen), temperature=0.0, ignore_eos=True)
            t0 = time.perf_counter()
            first, stats, out = None, None, []
            for ev in engine.submit(EngineRequest(rid, list(prompt), params)):
                if ev.error:
                    raise RuntimeError(f"turn {k}: {ev.error}")
                first = first or time.perf_counter()
                out += ev.token_ids
                stats = ev.stats or stats
            if out != gen:
                raise RuntimeError(f"turn {k}: the engine emitted other tokens than the script")
            turns.append(Turn(stats.prompt_tokens, stats.cached_tokens, first - t0, time.perf_counter() - t0))
            prompt = prompt + gen[: spec.think + 1] + result
    finally:
        engine.shutdown()
    return turns


def windowed_checkpoint(spec: TraceSpec):
    return full_vocab(qwen3_06b(windowed=True, window=spec.window))


def table(on: list[Turn], off: list[Turn]) -> list[str]:
    lines = ["| turn | prompt tokens | computed, anchors on | computed, anchors off | TTFT on (s) | TTFT off (s) | TTFT off/on |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for k, (a, b) in enumerate(zip(on, off), 1):
        lines.append(f"| {k} | {a.prompt_tokens} | {a.computed} | {b.computed} | {a.ttft_s:.2f} | {b.ttft_s:.2f} "
                     f"| {b.ttft_s / a.ttft_s:.2f}x |")
    sa, sb = sum(t.computed for t in on), sum(t.computed for t in off)
    ta, tb = sum(t.ttft_s for t in on), sum(t.ttft_s for t in off)
    lines.append(f"| all | {sum(t.prompt_tokens for t in on)} | {sa} | {sb} | {ta:.2f} | {tb:.2f} | {tb / ta:.2f}x |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="3 turns on a window-32 checkpoint")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    ap.add_argument("--turns", type=int, default=None, help="number of turns (default: 3 short, 10 full)")
    args = ap.parse_args(argv)
    spec = SHORT if args.short else FULL
    if args.turns:
        spec = dataclasses.replace(spec, turns=args.turns)
    model = windowed_checkpoint(spec)
    on = run_trace(model, spec, anchors=True, threads=args.threads)
    off = run_trace(model, spec, anchors=False, threads=args.threads)
    print(f"agent trace: {spec.turns} turns, window {spec.window}, interval {spec.interval}, "
          f"think {spec.think} + opener + args {spec.args}, "
          f"tool result {spec.result}; median TTFT on {statistics.median(t.ttft_s for t in on):.2f}s, "
          f"off {statistics.median(t.ttft_s for t in off):.2f}s")
    print("\n".join(table(on, off)))


if __name__ == "__main__":
    main()
