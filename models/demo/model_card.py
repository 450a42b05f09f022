"""The checkpoint's model card (checkpoint/README.md), written from recorded facts.

What it is for: one place that says what the demo checkpoint is and is not,
filled from `training.json` (written by train.py) and `evaluation.json`
(written by evaluate_offline.py), so the figures in the card are the
figures that were measured, never typed by hand.

What it is not for: the package's documentation (MODEL_CARD.md next to this
file describes the recipe; this card travels with the weights).
"""

from __future__ import annotations

import json
from pathlib import Path


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _metrics_table(ev: dict) -> str:
    rows = "\n".join(f"| {name} | {_pct(m['rate'])} | {m['passed']}/{m['total']} |" for name, m in ev["metrics"].items())
    return f"| metric | rate | passed |\n|---|---|---|\n{rows}"


def _figures(ev: dict | None, run: str, intro, measured=lambda ev: "") -> str:
    """A metrics section: `intro(ev)`, the table, the time it took; or how to make the figures."""
    if not ev:
        return f"Not evaluated yet: run `{run}`.\n"
    return f"{intro(ev)}\n\n{_metrics_table(ev)}\n\nMeasured in {ev['seconds']:.0f} s{measured(ev)}.\n"


def _evaluation_section(ev: dict | None) -> str:
    return _figures(ev, "python -m models.demo.evaluate_offline",
                    lambda ev: f"Greedy decoding with transformers `generate` on this bf16 checkpoint, over "
                               f"{ev['cases']} held-out cases (templates and values never seen in training; "
                               f"their words, cities and units aside, all occur in training requests):",
                    lambda ev: f" with torch {ev['torch']}")


def _status(ev: dict | None) -> str:
    """One honest paragraph: does the checkpoint do what it was trained for, by the measured figures."""
    if not ev:
        return "**Status**: not evaluated through the HTTP API yet."
    m = ev["metrics"]
    calls, answers = m["tool_call"]["rate"], m["final_answer"]["rate"]
    if calls >= 0.9 and answers >= 0.9:
        return (f"**Status**: on held-out requests it makes the right call {_pct(calls)} of the time and quotes "
                f"the result in {_pct(answers)} of its answers (figures below).")
    missed = " and ".join(name for name, rate in (("calls", calls), ("answers", answers)) if rate < 0.9)
    return (f"**Status: below its target ({missed}).** On held-out requests {_pct(calls)} of its calls name "
            f"the right tool with the right arguments, and {_pct(answers)} of its answers quote the tool result "
            f"(targets: 90% each). Treat its calls as plumbing tests of the server, not as answers.")


def _http_section(ev: dict | None) -> str:
    return _figures(ev, "python -m models.demo.evaluate_http --write",
                    lambda ev: f"`anchorage serve` on this checkpoint, driven by the official `openai` SDK: "
                               f"{ev['cases']} held-out cases played as agent loops, greedy, offering "
                               f"`configs/demo_tools.json`; `budget_N_*` rows are the first turn under "
                               f"`reasoning_budget_tokens` N (valid: a parseable call of a known tool follows; "
                               f"exact: the thought is cut exactly where the budget says, by token ids -- the budget "
                               f"message of `configs/demo.toml`, a newline, then `</think>`, start right there). "
                               f"The server's tool-call grammar is on, as by default: once the model opens a call, "
                               f"the call fits one of the tools' schemas; which tool and which values stay the model's:")


def _agent_steps(tr: dict) -> int:
    if "agent_steps_run" in tr:
        return tr["agent_steps_run"]
    return tr.get("steps", 0) - (tr.get("drill_steps_run") or 0)  # cards of runs without drill steps between


def _redrill(tr: dict) -> str:
    if not tr.get("redrill_steps_run"):
        return ""
    return (f", with one more drill batch after every {tr['config'].get('drill_every')}th agent step "
            f"({tr['redrill_steps_run']} in all)")


def _idle(tr: dict) -> str:
    idle = tr.get("idle_estimate_train_seconds")
    return f"; from its CPU time, about {idle / 60:.1f} min of training on an idle machine" if idle else ""


def _openings(tr: dict) -> str:
    cfg = tr["config"]
    if not tr.get("opening_steps_run"):
        return ""
    return (f", and after every {cfg['opening_every']} agent steps a batch of {cfg['opening_rows']} thought openings "
            f"(a request and its first thought's first two sentences, trained on those alone: where the held-out "
            f"misses were made; `openings.py`), {tr['opening_steps_run']} in all, each counted "
            f"{cfg['opening_cost']} agent steps of the budget")


def _selection(tr: dict) -> str:
    return f"\n\n{tr['selection']}" if tr.get("selection") else ""


def _budget(cfg: dict) -> str:
    if "budget" not in cfg:
        return ""
    openings = " and the openings below" if cfg.get("opening_every") else ""
    return (f" (what is left of a budget of {cfg['budget']} agent steps once the drill{openings}, each of its steps "
            f"counting {cfg['drill_cost']} of one, has run)")


def _ranks(cfg: dict) -> str:
    workers = cfg.get("workers", 1)
    if workers <= 1:
        return ""
    return f" ({workers} data-parallel processes, each taking a share of every batch's rows)"


def write(out: Path) -> None:
    tr = _load(out / "training.json") or {}
    ev = _load(out / "evaluation.json")
    cfg = tr.get("config", {})
    early = " It stopped early at the wall-clock guard." if tr.get("stopped_early") else ""
    full = " and ".join(str(i) for i in cfg.get("full_layers", (0,)))
    text = f"""# anchorage demo model

A **toy**: a {tr.get('parameters', 0) / 1e6:.1f}M-parameter Qwen3 trained from scratch in minutes on CPU,
on synthetic conversations, so that anchorage serves something agent-shaped out of the box. It is
trained to think in `<think>`, call one of four tools in Qwen3 hermes format
(`<tool_call>{{"name": ..., "arguments": ...}}</tool_call>`), read the `<tool_response>`, and answer
with the value it was given.

{_status(_load(out / "evaluation_http.json"))}

## What it is not

- Not a general assistant: it knows nothing beyond its training templates. Ask anything else and
  it says so (or gets it wrong).
- Only these tools, with exactly these schemas: `calculate` (a, op, b), `get_weather` (city; a fixed demo
  table in `models/demo/data/cities.json`, not real weather), `convert_units` (value, from_unit,
  to_unit), `get_time` (city). The `tools` array is `configs/demo_tools.json`; other tools or schemas
  will confuse it.
- English only, short conversations (trained up to ~900 tokens).

## Shape

`Qwen3ForCausalLM`: {cfg.get('layers')} layers, hidden {cfg.get('hidden')}, {cfg.get('heads')} heads
({cfg.get('kv_heads')} KV heads, head_dim {cfg.get('head_dim')}), MLP {cfg.get('intermediate')}, vocab
{tr.get('vocab_size')} (byte-level BPE trained on the training corpus with every name cut out), tied embeddings, bf16 weights.
**Windowed layers**: `use_sliding_window=true`, `sliding_window={cfg.get('window')}`, and `layer_types` (which
is what transformers and anchorage read; `max_window_layers` is left at its default) gives full attention
to layers {full} and a {cfg.get('window')}-token sliding window to every other layer. The thinking text
restates the values a call needs every few dozen tokens, because the windowed layers only see
{cfg.get('window')} tokens back, and a two-step plan's first thought ends with its second step, which the
second turn's thought opens by repeating.

Chat template (`chat_template.jinja`): Qwen3 style. The generation prompt opens `<think>\\n`
(`enable_thinking=false` renders an empty closed block instead); assistant turns after the last user
query keep their `reasoning_content`, so an agent loop that passes reasoning back re-renders exactly
the tokens the model generated. EOS is `<|im_end|>`.

## How it was trained

`python -m models.demo.train --out models/demo/checkpoint --seed {tr.get('seed')}`. The initial weights
carry a planted copy circuit (`train.plant_induction_circuit`: a previous-token head in layer 0, an
induction head in layer 1), because a model this small otherwise learns to copy unseen text only in a
sudden change after a thousand or more dense copy steps. First a copy drill:
{tr.get('drill_steps_run')} steps of {cfg.get('drill_rows')} repeat-after-me turns of made-up words and
numbers, until its loss fell under {cfg.get('drill_loss')}. Then {_agent_steps(tr)} steps{_budget(cfg)} of {cfg.get('rows')} of
{tr.get('conversations')} synthetic agent conversations (seeded, `models/demo/corpus.py`; half of the requests
composed from parts, `corpus_composed.py`, so that no list of phrasings can be learnt by heart; most name
made-up cities and some made-up units, so that calls copy names rather than recall them){_redrill(tr)}{_openings(tr)}. Loss on
assistant tokens only, AdamW (lr {cfg.get('lr')}, warmup {cfg.get('warmup')}, flat through the drill,
then cosine), fp32 on {cfg.get('threads')} CPU threads{_ranks(cfg)} with deterministic algorithms. The saved weights
are an exponential average (decay {cfg.get('ema')}) over the agent steps after the first
{cfg.get('ema_from', 0):.0%}, cast to bf16.
Final training loss {tr.get('final_loss', 0):.4f}. Wall time {tr.get('wall_seconds', 0) / 60:.1f} min
({tr.get('data_seconds')} s data and tokenizer, {tr.get('train_seconds')} s training,
{tr.get('seconds_per_step')} s/step; load average {tr.get('load_average_at_end', 0):.1f} at the end, on a
machine shared with other work{_idle(tr)}).{early}{_selection(tr)}

## Evaluation through the HTTP API

{_http_section(_load(out / "evaluation_http.json"))}
## Offline evaluation

{_evaluation_section(ev)}
Rerun: `python -m models.demo.evaluate_offline --checkpoint models/demo/checkpoint`.
"""
    (out / "README.md").write_text(text)
