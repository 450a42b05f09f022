"""Held-out requests with and without their frames: which held-out call misses the frames cause, which the cores.

What it is for: `python -m models.demo.probe_frames [--checkpoint X]` runs the offline held-out evaluation
(evaluate_offline.evaluate) on the held-out cases as they are and on the same cases with their frames taken
off (`unframed`: "Sorry to bother you. look up Bogota's weather for me." becomes "Look up Bogota's weather
for me."), and prints both figures and the held-out calls right per core, framed and unframed.

What it is not for: the model card's figures (evaluate_offline, evaluate_http evaluate the cases as they are).

Why it is shaped so: a held-out request is a held-out core (the sentence that carries the meaning) in a
held-out frame (a greeting and a courtesy made of words training never shows). Read one by one, the misses
suggest the frames ("Excuse me" copied as the city); counted over the same cases with and without them, the
frames' share is measured. The shipped checkpoint (NG3000, seed 0) got 107 held-out calls right framed
and 115 unframed: the frames cost 8. 18 of the 29 misses left came from 6 of the 32 held-out cores, each
going wrong in at least three cases of four, and always in the same way: "What hour is it in {city} at the
moment?" and "Time check for {city}?" sent to the weather, "My friend lives in {city}; how warm is it
there?" taken for a temperature difference, "Look up {city}'s weather for me." calling the city
"Look up", "temperature {city} now" copying a wrong piece, one chain's second step missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

from models.demo import corpus_phrasing as ph
from models.demo.corpus import HeldOutCase, held_out_cases
from models.demo.corpus_values import HELD_OUT
from models.demo.evaluate_offline import evaluate


@lru_cache(maxsize=1)
def _core_texts() -> dict[str, str]:
    return {c.id: c.text for v in vars(ph).values() if isinstance(v, list) for c in v if isinstance(c, ph.Core)}


def unframed(case: HeldOutCase) -> HeldOutCase:
    """`case` with its request's greeting and courtesy taken off (ph.frame put them on); the same calls and
    results. A chat case has no frame and comes back as it is."""
    if not case.steps:
        return case
    core_id, frame_id = case.template_id.split("|")
    split, p, s, style = frame_id.split(".")
    if split != HELD_OUT:
        raise ValueError(f"not a held-out frame: {case.template_id}")
    prefix, suffix = ph.PREFIXES[HELD_OUT][int(p[1:])], ph.SUFFIXES[HELD_OUT][int(s[1:])]
    text = case.messages[0]["content"]
    if style == "lower":
        prefix, suffix = prefix.lower(), suffix.lower()
    if not (text.startswith(prefix) and text.endswith(suffix)):
        raise ValueError(f"{case.case_id}: {text!r} is not framed by {prefix!r} and {suffix!r}")
    body = text[len(prefix): len(text) - len(suffix)]
    if style != "lower" and _core_texts()[core_id][0].isupper():
        body = body[0].upper() + body[1:]  # frame() lower-cased the core's first letter after a greeting
    return dataclasses.replace(case, template_id=f"{core_id}|unframed",
                               messages=({"role": "user", "content": body},))


def probe(checkpoint: Path) -> dict:
    cases = held_out_cases()
    report = {}
    for name, chosen in (("framed", cases), ("unframed", [unframed(c) for c in cases])):
        result = evaluate(checkpoint, cases=chosen)
        cores: Counter = Counter()
        right: Counter = Counter()
        for case in chosen:
            if case.steps:
                core = case.template_id.split("|")[0]
                cores[core] += 1
                right[core] += result["records"][case.case_id]["tool_call_ok"]
        report[name] = {"metrics": {k: v["passed"] for k, v in result["metrics"].items()},
                        "calls_right_by_core": {core: f"{right[core]}/{cores[core]}" for core in sorted(cores)}}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=Path(__file__).parent / "checkpoint")
    args = ap.parse_args()
    print(json.dumps(probe(args.checkpoint), indent=2))


if __name__ == "__main__":
    main()
