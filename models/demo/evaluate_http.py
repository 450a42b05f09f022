"""Evaluate the served demo model through the HTTP API, with the official openai SDK.

What it is for: issue 8's acceptance, measured the way a user meets the model:
`python -m models.demo.evaluate_http [--base-url http://127.0.0.1:8000/v1]`
plays every held-out case (corpus.held_out_cases: phrasings and values never
seen in training) as an agent loop against `/v1/chat/completions`, offering
exactly the tools in configs/demo_tools.json, greedy, and reports:

- tool_call: each step's `tool_calls` name the right tool with the right
  arguments (numbers numerically, strings case-insensitively);
- final_answer: given the tool results, the answer contains the expected value;
- chat_no_tool: plain chat requests make no tool call;
- budget_N_valid / budget_N_exact: with `reasoning_budget_tokens` N (0 and 8),
  the first turn still makes a valid call (the calls it finished: one cut by
  max_tokens is left out), and the reasoning is cut exactly
  after N thinking tokens (token ids from `return_token_ids`), followed by the
  budget message of configs/demo.toml (a newline) and `</think>`.

Without --base-url it starts `anchorage serve` on the demo checkpoint itself.
What it is not for: the offline (transformers-only) figures in the model card,
which evaluate_offline.py produces.
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import httpx
from openai import OpenAI

from models.demo import model_card
from models.demo.corpus import held_out_cases
from server.child_process import serve_child
from server.settings import DEMO_CONFIG
from models.demo.evaluate_offline import contains_value, same_arguments

TOOLS = json.loads((resources.files("configs") / "demo_tools.json").read_text())
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}
BUDGETS = (0, 8)
# What the demo configuration forces between a cut thought and `</think>`; a server run with another
# configuration must be evaluated with its own message (evaluate(budget_message=...)).
DEMO_BUDGET_MESSAGE = tomllib.loads(DEMO_CONFIG.read_text()).get("reasoning_budget_message", "")


def served_demo():
    """`anchorage serve` with no --model: the built-in demo checkpoint, as a newcomer meets it."""
    return serve_child(["--log-level", "warning"], start_timeout_s=300)


def _calls(choice) -> list[tuple[str, dict | None]]:
    """The calls the model finished, with their parsed arguments (None: not JSON). A last call cut by
    max_tokens (the server returns it as far as it got) is left out: the model did not finish it."""
    out = []
    for tc in choice.message.tool_calls or []:
        try:
            args = json.loads(tc.function.arguments)
        except json.JSONDecodeError:
            args = None
        out.append((tc.function.name, args))
    if choice.finish_reason == "length" and out and out[-1][1] is None:
        out.pop()
    return out


def _matches(got, want) -> bool:
    remaining = list(want)
    for name, args in got:
        hit = next((w for w in remaining if w.name == name and same_arguments(args, w.arguments)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return not remaining


def _assistant(message) -> dict:
    msg = {"role": "assistant", "content": message.content or ""}
    reasoning = getattr(message, "reasoning_content", None)
    if reasoning:
        msg["reasoning_content"] = reasoning  # passed back, so the next prompt rejoins the cache
    if message.tool_calls:
        msg["tool_calls"] = [tc.model_dump(exclude_none=True) for tc in message.tool_calls]
    return msg


def play(client: OpenAI, model: str, case) -> dict:
    """One held-out case as an agent loop; returns what passed."""
    messages = list(case.messages)
    ask = dict(model=model, tools=TOOLS, temperature=0, max_tokens=448)
    if not case.steps:
        r = client.chat.completions.create(messages=messages, **ask).choices[0].message
        return {"chat_ok": not r.tool_calls and bool(r.content)}
    calls_ok = True
    for step in case.steps:
        choice = client.chat.completions.create(messages=messages, **ask).choices[0]
        r = choice.message
        ok = _matches(_calls(choice), step.calls)
        calls_ok &= ok
        if ok:
            messages.append(_assistant(r))
            ids = [tc.id for tc in r.tool_calls]
        else:  # send the expected call, so the answer metric measures answering
            ids = [f"call_expected_{i}" for i in range(len(step.calls))]
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in zip(ids, step.calls)]})
        messages += [{"role": "tool", "tool_call_id": i, "content": res} for i, res in zip(ids, step.results)]
    final = client.chat.completions.create(messages=messages, **ask).choices[0].message
    answer_ok = not final.tool_calls and all(contains_value(final.content or "", v) for v in case.answer_must_contain)
    return {"tool_call_ok": calls_ok, "answer_ok": answer_ok}


def budget_probe(root: str, ids: dict, message: list[int], model: str, case, budget: int) -> dict:
    """First turn under a thinking budget: a valid call still follows, and the
    thought is cut exactly after `budget` thinking tokens (the prompt's own tokens
    after `<think>` count, as in llama.cpp): the budget message's ids, then the
    closer, start right there (exact) -- or the closer comes earlier, if the
    model closed its thought by itself (within)."""
    body = httpx.post(root + "/v1/chat/completions", timeout=600, json={
        "model": model, "messages": list(case.messages), "tools": TOOLS, "temperature": 0, "max_tokens": 448,
        "reasoning_budget_tokens": budget, "return_token_ids": True}).json()
    prompt, out = body["prompt_token_ids"], body["choices"][0]["token_ids"]
    already = len(prompt) - 1 - max(i for i, t in enumerate(prompt) if t == ids["<think>"])
    allowed = max(0, budget - already)
    closed_at = out.index(ids["</think>"]) if ids["</think>"] in out else None
    calls = body["choices"][0]["message"].get("tool_calls") or []
    if body["choices"][0]["finish_reason"] == "length" and calls and not _json_object(
            calls[-1]["function"]["arguments"]):
        calls = calls[:-1]  # as _calls: a call max_tokens cut is not one the model finished
    valid = bool(calls) and all(c["function"]["name"] in TOOL_NAMES for c in calls) and all(
        _json_object(c["function"]["arguments"]) for c in calls)
    cut = closed_at == allowed + len(message) and out[allowed:closed_at] == message
    return {"valid": valid, "exact": cut,
            "within": closed_at is not None and closed_at <= allowed + len(message)}


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def _rate(flags) -> dict:
    flags = list(flags)
    return {"rate": sum(flags) / len(flags) if flags else 0.0, "passed": sum(flags), "total": len(flags)}


def evaluate(base_url: str, workers: int = 4, budget_message: str = DEMO_BUDGET_MESSAGE) -> dict:
    client = OpenAI(base_url=base_url, api_key="unused", timeout=600)
    model = client.models.list().data[0].id
    root = base_url.removesuffix("/v1")
    def tokenize(text: str) -> list[int]:
        return httpx.post(root + "/tokenize", json={"content": text}, timeout=60).json()["tokens"] if text else []
    ids = {m: tokenize(m)[0] for m in ("<think>", "</think>")}
    message = tokenize(budget_message)
    cases = held_out_cases()
    started = time.time()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda c: play(client, model, c), cases))
        tool_cases = [c for c in cases if c.steps]
        probes = {b: list(pool.map(lambda c: budget_probe(root, ids, message, model, c, b), tool_cases)) for b in BUDGETS}
    metrics = {
        "tool_call": _rate(r["tool_call_ok"] for r in results if "tool_call_ok" in r),
        "final_answer": _rate(r["answer_ok"] for r in results if "answer_ok" in r),
        "chat_no_tool": _rate(r["chat_ok"] for r in results if "chat_ok" in r),
    }
    for b, rows in probes.items():
        metrics[f"budget_{b}_valid"] = _rate(p["valid"] for p in rows)
        metrics[f"budget_{b}_exact"] = _rate(p["exact"] for p in rows)
        metrics[f"budget_{b}_within"] = _rate(p["within"] for p in rows)
    return {"metrics": metrics, "cases": len(cases), "seconds": round(time.time() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="an anchorage /v1 URL; default: start one on the demo model")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--write", action="store_true",
                    help="store the report as evaluation_http.json in the demo checkpoint and refresh its model card")
    args = ap.parse_args()
    if args.base_url:
        report = evaluate(args.base_url, args.workers)
    else:
        with served_demo() as base:
            report = evaluate(base + "/v1", args.workers)
    print(json.dumps(report, indent=2))
    if args.write:
        folder = Path(str(resources.files("models.demo") / "checkpoint"))
        (folder / "evaluation_http.json").write_text(json.dumps(report, indent=2) + "\n")
        model_card.write(folder)


if __name__ == "__main__":
    main()
