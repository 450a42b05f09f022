"""Second steps of two-step plans on training-distribution conversations: learnt, or out of reach?

What it is for: `python -m models.demo.probe_plans --checkpoint X` takes fresh training-distribution
conversations of the sequential plans (a temperature difference, a chained calculation), gives the
model everything up to its second calling turn (its own first thought, the first calls, their
results), generates that turn greedily and counts the calls that equal the corpus's.

What it is not for: the held-out figures (evaluate_offline, evaluate_http). Nothing here is held out;
the conversations come from a seed the training run did not use.

Why it is shaped so: a held-out miss of a second step can be phrasing the model never saw, or a
step it never learnt at all. On the training distribution only the second remains. Measured this
way (seed 7, each checkpoint with the corpus code it was trained on), the previous checkpoint got
0 of 18 temperature differences and 0 of 30 chains right: the step was never learnt. Its windowed
layers saw 64 tokens back, and a chain's second turn starts 65-80 tokens after the first thought
names the second step (115-155 for a temperature difference). With a 96-token window and the
second step as the first thought's last sentence, runs got 14 to 25 of 23-27 chains and 3 to 11 of
21-25 differences; the shipped checkpoint 14 of 23 and 8 of 25 (models/demo/README.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from models.demo import corpus
from models.demo.evaluate_offline import Generator, calls_match
from models.demo.parse import ToolCall, parse_turn

PLANS = ("wdiff", "chain")


def second_turns(seed: int = 7, conversations: int = 1500, limit: int = 48
                 ) -> list[tuple[str, list[dict], list[ToolCall]]]:
    """(kind, the messages before the second calling turn, that turn's calls) of up to `limit` plans
    whose first turn kept its whole thought."""
    out = []
    for conv in corpus.training_conversations(seed, conversations):
        if len(out) >= limit:
            break
        if conv.kind not in PLANS or not conv.enable_thinking:
            continue
        query = max(i for i, m in enumerate(conv.messages) if m["role"] == "user")
        calling = [i for i, m in enumerate(conv.messages) if i > query and m.get("tool_calls")]
        if (len(calling) < 2 or not conv.messages[calling[0]]["reasoning_content"]
                or calling[0] in conv.untrained_reasoning):
            continue  # a first thought dropped (as some clients do) or cut by a budget: not what this probes
        calls = [ToolCall(c["function"]["name"], c["function"]["arguments"], "")
                 for c in conv.messages[calling[1]]["tool_calls"]]
        out.append((conv.kind, conv.messages[: calling[1]], calls))
    return out


def probe(checkpoint: Path, seed: int = 7) -> dict[str, dict]:
    gen = Generator(checkpoint, batch=16)
    cases = second_turns(seed)
    report = {kind: {"right": 0, "total": 0} for kind in PLANS}
    for (kind, _, want), out in zip(cases, gen.run([gen.encode(messages) for _, messages, _ in cases], 256)):
        report[kind]["total"] += 1
        report[kind]["right"] += calls_match(parse_turn(gen.text(out)).tool_calls, want)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=Path(__file__).parent / "checkpoint")
    ap.add_argument("--seed", type=int, default=7, help="corpus seed; the shipped run trained on seed 0")
    args = ap.parse_args()
    print(json.dumps(probe(args.checkpoint, args.seed), indent=2))


if __name__ == "__main__":
    main()
