"""Prompt-lookup speculation (`--ngram-draft-tokens`): how often the guesses hold, and what a step of them costs.

Two parts, each in one process, drafting and plain engines side by side:

1. Acceptance, on agent text: the built-in demo model plays held-out agent
   requests greedily -- the first turn (thought and call) and the answer after
   the tool result -- once plainly and once with drafts, alternated. Printed:
   on how many prompts the tokens were the same (in bf16 a step of several
   rows rounds differently from a one-row step, so a near-tie can break the
   other way), tokens per step and the wall-clock ratio. The demo model is
   tiny, so its steps cost Python, not weights: the wall-clock ratio says
   little about a large model; tokens per step is what carries over.
2. Cost, on the Qwen3-0.6B shape (random bf16 weights): the model runner's
   forward step for 1, 2, 4 and 8 sequences each feeding one token (a plain
   decode) or 1 + d tokens (d drafts), alternated. Every guess right yields
   d + 1 tokens a sequence for that cost, every guess wrong one: the bounds of
   what drafts win and lose, and where `--ngram-draft-max-batch` should stop.

The two combine into an estimate, printed as one: plain tokens/s x (tokens
per step at the demo's acceptance) / (cost of a step with that many drafts).
It is an estimate because no real 0.6B model writes agent text here.

    .venv/bin/python -m bench.ngram_speculation [--cases 24] [--drafts 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.checkpoints import qwen3_06b
from scheduler.engine import EngineRequest
from scheduler.forward_batch import ForwardBatch, SeqChunk
from scheduler.sampling_params import SamplingParams
from server.runtime import build_runtime, demo_model_dir
from server.settings import ServeSettings


def _engine(model, **overrides):
    settings = ServeSettings(model=model, max_num_seqs=4, **overrides)
    _info, engine, tokenizer, _runner, _ = build_runtime(settings)
    engine.start()
    return engine, tokenizer


def _generate(engine, rid: str, prompt: list[int], max_tokens: int, ignore_eos: bool = False):
    steps = engine.counters.steps
    t0 = time.perf_counter()
    events = list(engine.submit(EngineRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, temperature=0,
                                                                           ignore_eos=ignore_eos))))
    return [t for e in events for t in e.token_ids], time.perf_counter() - t0, engine.counters.steps - steps


def _agent_prompts(tokenizer, cases: int) -> list[list[int]]:
    from models.demo.corpus import held_out_cases
    from models.demo.render import render
    from models.demo.tools import TOOLS

    prompts = []
    for case in [c for c in held_out_cases() if c.steps][:cases]:
        first = case.steps[0]
        call = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in first.calls]}
        results = [{"role": "tool", "content": r} for r in first.results]
        for messages in (case.messages, [*case.messages, call, *results]):
            text = render(messages, TOOLS, add_generation_prompt=True, enable_thinking=True)
            prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def acceptance(cases: int, drafts: int) -> dict:
    plain, tokenizer = _engine(demo_model_dir())
    drafting, _ = _engine(demo_model_dir(), ngram_draft_tokens=drafts)
    prompts = _agent_prompts(tokenizer, cases)
    totals = {"tokens": 0, "plain_steps": 0, "draft_steps": 0, "plain_s": 0.0, "draft_s": 0.0}
    for i, prompt in enumerate(prompts):
        for name, engine in (("plain", plain), ("draft", drafting)) if i % 2 == 0 else (("draft", drafting),
                                                                                         ("plain", plain)):
            out, seconds, steps = _generate(engine, f"{name}{i}", prompt, 200)
            totals[f"{name}_s"] += seconds
            totals[f"{name}_steps"] += steps
            if name == "plain":
                want = out
            else:
                got = out
        totals["same"] = totals.get("same", 0) + (got == want)  # bf16: a near-tie may break the other way
        totals["tokens"] += len(want)
    c = drafting.scheduler.counters
    totals.update(drafted=c.draft_tokens, accepted=c.draft_accepted)
    plain.shutdown()
    drafting.shutdown()
    return totals


def cost(rows: list[int], batches: list[int], repeats: int, steps: int = 5) -> dict[tuple[int, int], float]:
    """Milliseconds of one forward step of `b` sequences each feeding `r` tokens at position 256 (1: a plain
    decode, 1 + d: a decode with d drafts), for every b in `batches` and r in `rows`; median over alternated
    rounds of `steps` steps each."""
    settings = ServeSettings(model=qwen3_06b(), dtype="bfloat16", max_num_seqs=max(batches), max_model_len=512)
    _info, _engine, _tok, runner, _ = build_runtime(settings)
    per_seq = -(-(256 + max(rows)) // runner.page_size)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(max(batches))]
    prompt = [(31 * j) % 150000 + 100 for j in range(256 + max(rows))]
    for i, table in enumerate(tables):
        runner.step(ForwardBatch([SeqChunk(i, prompt[:256], 0, table, table, True)]))
    ms: dict[tuple[int, int], list[float]] = {}
    shapes = [(b, r) for b in batches for r in rows]
    for rnd in range(repeats):
        for b, r in shapes if rnd % 2 == 0 else shapes[::-1]:
            batch = ForwardBatch([SeqChunk(i, prompt[256:256 + r], 256, tables[i], tables[i], True, drafts=r - 1)
                                  for i in range(b)])
            for _ in range(steps):
                t0 = time.perf_counter()
                runner.step(batch)
                ms.setdefault((b, r), []).append((time.perf_counter() - t0) * 1000)
    return {shape: statistics.median(v) for shape, v in ms.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=24, help="held-out agent requests (two turns each)")
    ap.add_argument("--drafts", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    a = acceptance(args.cases, args.drafts)
    per_step_plain = a["tokens"] / a["plain_steps"]
    per_step = a["tokens"] / a["draft_steps"]
    print(f"demo model, {args.cases} held-out requests x 2 turns, greedy, drafts {args.drafts}: {a['tokens']} tokens; "
          f"the same tokens with and without drafts on {a['same']} of {2 * args.cases} prompts; "
          f"steps {a['plain_steps']} -> {a['draft_steps']} ({per_step_plain:.2f} -> {per_step:.2f} tokens a step); "
          f"drafted {a['drafted']}, accepted {a['accepted']} "
          f"({a['accepted'] / max(1, a['drafted']):.0%}); wall {a['plain_s']:.1f} s -> {a['draft_s']:.1f} s "
          f"({a['plain_s'] / a['draft_s']:.2f}x)")
    counts = sorted({2, args.drafts, 2 * args.drafts})
    batches = [1, 2, 4, 8]
    c = cost([1, *[k + 1 for k in counts]], batches, args.repeats)
    print(f"Qwen3-0.6B shape, bf16, sequences at position 256: a forward step with each sequence feeding 1 + d "
          f"tokens, against a plain decode step of as many sequences (median of {args.repeats} alternated rounds "
          "of 5):")
    print("| sequences | plain step ms | " + " | ".join(f"{k} drafts each" for k in counts) + " |")
    print("|---|---|" + "---|" * len(counts))
    for b in batches:
        print(f"| {b} | {c[(b, 1)]:.1f} | " + " | ".join(f"{c[(b, k + 1)]:.1f} ({c[(b, k + 1)] / c[(b, 1)]:.2f}x)"
                                                         for k in counts) + " |")
    ratio = c[(1, args.drafts + 1)] / c[(1, 1)]
    print(f"one stream: every guess right yields {args.drafts + 1} tokens a step for {ratio:.2f}x a plain step's "
          f"time, every guess wrong one. Estimate at the demo's acceptance: {per_step:.2f} tokens a step / "
          f"{ratio:.2f} = {per_step / ratio:.2f}x plain tokens/s (an estimate: no real 0.6B model writes agent text "
          "here; sampling and the engine's Python are left out of the step times)")

if __name__ == "__main__":
    main()
