"""`make bench`: anchorage against its peers, side by side in one run -> docs/benchmarks.md.

    .venv/bin/python -m bench.run [--short] [--only single c8 c32 long agent slots]
                                  [--peers anchorage transformers llama-server llama-cpp-python generate]

Builds the Qwen3-0.6B-shaped bf16 checkpoints (bench.checkpoints, with the
full-vocabulary tokenizer of bench.vocab), installs each peer into its own
venv in the work folder (bench.venvs), then, round by round (one round per
repeat, so slow drift of the shared machine hits every peer alike), starts
each peer's server on loopback, warms it up, runs the load workloads through
the streaming load generator, and stops it. transformers' `generate` runs
in-process as the no-server baseline. The agent trace (anchorage, anchors on
and off) and slot restore against prefill (anchorage and llama.cpp's server)
follow. A peer that cannot be installed or started is reported with the
reason, and the run goes on without it.

Not a test: the figures depend on the machine and on whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench import agent_trace, report, slot_http
from bench.checkpoints import qwen3_06b
from bench.loadgen import LoadSummary, run_concurrent, summarize
from bench.peers import ALL, Peer, Profile, cores
from bench.venvs import PeerUnavailable
from bench.vocab import full_vocab
from bench.workloads import FULL, SHORT, load_requests

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
LOAD = ("single", "c8", "c32", "long")
WORKLOADS = (*LOAD, "agent", "slots")
GENERATE = "transformers generate (in-process)"
PEERS_TEXT = [
    "- **anchorage**: `anchorage serve --dtype bfloat16 --max-num-seqs 32 --threads N`; continuous batching, "
    "paged KV, prefix cache.",
    "- **transformers serve**: `transformers serve MODEL --continuous-batching --device cpu --dtype bfloat16`, "
    "`OMP_NUM_THREADS=N`; EOS is disabled per request through `generation_config`.",
    "- **llama.cpp server**: `llama-server -np 32 --kv-unified -t N -tb N`, built from the llama.cpp source "
    "vendored in the llama-cpp-python sdist; bf16 GGUF from llama.cpp's `convert_hf_to_gguf.py`.",
    "- **llama-cpp-python server**: `python -m llama_cpp.server --n_threads N --interrupt_requests False`; it "
    "serves one request at a time (no batching across requests), so concurrent streams queue.",
    f"- **{GENERATE}**: `model.generate` on left-padded static batches in the benchmark process.",
]


def _check(peer: str, reqs, results, notes: dict) -> None:
    """Note (not hide) requests that failed, came back short, or saw another prompt length."""
    problems = []
    failed = [r.error for r in results if r.error]
    if failed:
        problems.append(f"{len(failed)} failed: {failed[0][:120]}")
    short = sum(1 for q, r in zip(reqs, results) if not r.error and r.tokens != q.max_tokens)
    if short:
        problems.append(f"{short} returned another token count than asked")
    off = sum(1 for q, r in zip(reqs, results) if r.prompt_tokens is not None and r.prompt_tokens != q.prompt_tokens)
    if off:
        problems.append(f"{off} prompts counted differently")
    if not all(r.completion_tokens is not None for r in results if not r.error):
        problems.append("tokens counted from stream events (no usage)")
    if problems:
        notes[peer] = "; ".join(sorted(set(notes.get(peer, "").split("; ") + problems) - {""}))


def _load_round(peer: Peer, model, sizes, specs, repeat, runs, notes, threads: int) -> None:
    max_len = max(s.prompt_range[1] + s.output_range[1] for s in specs) + 64
    with peer.server(model, Profile(max_seqs=32, ctx_per_seq=max_len, threads=threads)) as base:
        warm = load_requests(model, sizes.single, 999)[0]
        asyncio.run(run_concurrent(base, "/v1/completions", [peer.payload(warm.prompt, 4)]))
        for spec in specs:
            reqs = load_requests(model, spec, repeat)
            payloads = [peer.payload(q.prompt, q.max_tokens) for q in reqs]
            results, wall = asyncio.run(run_concurrent(base, "/v1/completions", payloads))
            _check(peer.name, reqs, results, notes.setdefault(spec.name, {}))
            runs.setdefault(spec.name, {}).setdefault(peer.name, []).append(summarize(results, wall))
            s = runs[spec.name][peer.name][-1]
            print(f"[bench] round {repeat + 1} {spec.name:6s} {peer.name:28s} {s.tok_per_s:8.2f} tok/s "
                  f"TTFT p50 {s.ttft_p50:6.2f}s ITL p50 {s.itl_p50 * 1000:6.0f}ms failed {s.failed}", flush=True)


def _generate_round(hf_model, model, specs, repeat, runs) -> None:
    from bench import hf_generate
    from bench.workloads import tokenizer

    tok = tokenizer(model)
    for spec in specs:
        reqs = load_requests(model, spec, repeat)
        results, wall = hf_generate.static_batch(hf_model, [tok.encode(q.prompt).ids for q in reqs],
                                                 [q.max_tokens for q in reqs])
        runs.setdefault(spec.name, {}).setdefault(GENERATE, []).append(summarize(results, wall))
        s = runs[spec.name][GENERATE][-1]
        print(f"[bench] round {repeat + 1} {spec.name:6s} {GENERATE:28s} {s.tok_per_s:8.2f} tok/s", flush=True)


def _profile(threads: int) -> tuple[str, str, list[str]]:
    """bench.profile_step in a child process (its own profilers, its own torch threads)."""
    cmd = [sys.executable, "-m", "bench.profile_step", "--threads", str(threads), "--new-tokens", "16"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout.strip() if out.returncode == 0 else f"profile failed (exit {out.returncode}):\n{out.stderr[-2000:]}"
    return ("Where anchorage's time goes", f"`{' '.join(cmd[1:])}`: one stream, 16 decode steps of anchorage's engine "
            "under cProfile and torch.profiler.", ["```", text, "```"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="anchorage against its peers, side by side; writes docs/benchmarks.md")
    ap.add_argument("--short", action="store_true", help="few tokens, one repeat: a quick check that everything runs")
    ap.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    ap.add_argument("--peers", nargs="+", choices=[*ALL, "generate"], default=[*ALL, "generate"])
    ap.add_argument("--out", type=Path, default=DOCS)
    ap.add_argument("--repeats", type=int, default=None, help="rounds per workload (default: 3, or 1 with --short)")
    ap.add_argument("--threads", type=int, default=cores(),
                    help="CPU threads for every peer (default: all cores); fewer when other jobs hold cores")
    args = ap.parse_args(argv)
    sizes = SHORT if args.short else FULL
    if args.repeats:
        sizes = dataclasses.replace(sizes, repeats=args.repeats)
    started, load_start = time.time(), report.load_average()
    model = full_vocab(qwen3_06b())
    unavailable: dict[str, str] = {}
    versions: dict[str, str] = {}

    peers: list[Peer] = []
    for key in args.peers:
        if key == "generate":
            continue
        peer = ALL[key]()
        try:
            peer.prepare(model)
            versions.update(peer.versions())
            peers.append(peer)
        except PeerUnavailable as exc:
            unavailable[peer.name] = str(exc)
            print(f"[bench] {peer.name} cannot run: {exc}", flush=True)

    specs = [s for s in (sizes.single, sizes.c8, sizes.c32, sizes.long) if s.name in args.only]
    runs: dict[str, dict[str, list[LoadSummary]]] = {}
    notes: dict[str, dict[str, str]] = {}
    hf_model = None
    if specs and "generate" in args.peers:
        import torch

        from bench import hf_generate

        torch.set_num_threads(args.threads)
        hf_model = hf_generate.load(model)
    for repeat in range(sizes.repeats if specs else 0):
        for peer in [p for p in peers if p.name not in unavailable]:
            try:
                _load_round(peer, model, sizes, specs, repeat, runs, notes, args.threads)
            except PeerUnavailable as exc:
                unavailable[peer.name] = str(exc)
                print(f"[bench] {peer.name} failed: {exc}", flush=True)
        if hf_model is not None:
            _generate_round(hf_model, model, specs, repeat, runs)
    del hf_model

    sections = []
    for spec in specs:
        r = spec
        intro = (f"{r.streams} stream(s) at once; prompts {r.prompt_range[0]}-{r.prompt_range[1]} tokens, "
                 f"outputs {r.output_range[0]}-{r.output_range[1]} tokens (seed {r.seed}); greedy, EOS ignored. "
                 "tokens/s is all generated tokens over the wall time; TTFT is to the first content chunk; "
                 "ITL is the gap between content chunks.")
        if spec.name == "single":
            intro += " For a single stream, tokens/s includes the prefill of the prompt."
        if GENERATE in runs.get(spec.name, {}):
            intro += (f" `{GENERATE}` is one left-padded static batch run until its longest output is done; its "
                      "TTFT/ITL are the batch's decode-step times, as if streamed.")
        sections.append((f"Workload: {spec.title}", intro, report.load_table(runs.get(spec.name, {}), notes.get(spec.name, {}))))

    if "slots" in args.only:
        rows: dict[str, list[dict]] = {}
        for peer in [p for p in peers if p.supports_slots and p.name not in unavailable]:
            for repeat in range(sizes.repeats):
                try:
                    row = slot_http.run(peer, model, sizes.slot_prefix, repeat, args.threads)
                    rows.setdefault(peer.name, []).append(row)
                    print(f"[bench] slots {peer.name}: {rows[peer.name][-1]}", flush=True)
                except PeerUnavailable as exc:
                    unavailable[f"{peer.name} (slots)"] = str(exc)
                    break
        sections.append(("Workload: slot restore against prefill",
                         f"A {sizes.slot_prefix}-token prefix is prefilled in slot 0 of a fresh server and saved; a "
                         "second fresh server restores the file and answers the prefix plus 8 tokens in slot 0. "
                         "prefill is the first request's TTFT; save and restore are the HTTP calls' wall times.",
                         report.slot_table(rows)))

    if "agent" in args.only and any(p.name == "anchorage" for p in peers):
        spec = agent_trace.SHORT if args.short else agent_trace.FULL
        try:
            swa = agent_trace.windowed_checkpoint(spec)
            on = agent_trace.run_trace(swa, spec, anchors=True, threads=args.threads)
            off = agent_trace.run_trace(swa, spec, anchors=False, threads=args.threads)
            sections.append((
                "Workload: agent trace (anchors on / off)",
                f"anchorage's engine in-process on the windowed checkpoint (window {spec.window} on all layers but "
                f"the first, eviction interval {spec.interval}). {spec.turns} turns; each generates {spec.think} "
                f"tokens, the tool-call opener, {spec.args} argument tokens; the next prompt is the previous one + "
                f"the tokens up to and including the opener + {spec.result} tool-result tokens. `computed` is prompt "
                "tokens minus the engine's cached tokens. The turns are scripted (a logit processor forces a seeded "
                "token sequence with the opener at its step; the model still runs every step), so both settings "
                "see identical prompts. No peer appears: none has anchors, llama.cpp's Qwen3 graph has no sliding "
                "window (it would run this checkpoint with full attention on every layer, keeping all KV), and "
                "over HTTP no peer can be made to emit a scripted sequence.",
                agent_trace.table(on, off)))
        except Exception as exc:  # report, do not lose the other tables
            unavailable["anchorage (agent trace)"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()

    if "anchorage" not in unavailable and any(p.name == "anchorage" for p in peers):
        sections.append(_profile(args.threads))
    versions["threads per peer"] = f"{args.threads} (of {cores()} cores)"
    command = " ".join(["python -m bench.run", *(sys.argv[1:] if argv is None else argv)])
    report.write(args.out, command=command, started=started, load_start=load_start,
                 versions=versions, unavailable=unavailable, sections=sections,
                 checkpoint=(f"`{model.name}`: random bf16 weights of Qwen3-0.6B's shape (hidden 1024, 28 layers, "
                             "16 heads, 8 KV heads, head_dim 128, vocab 151936), the tiny Qwen tokenizer padded to the "
                             "full vocabulary (bench/vocab.py); llama.cpp peers read its bf16 GGUF conversion."),
                 peers_text=PEERS_TEXT, closing=[])
    print(f"[bench] wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
