"""Synthetic agent conversations for the demo model, and its held-out cases.

What it is for: `training_conversations(seed, count)` -- a deterministic list
of OpenAI-style conversations (system, user, assistant turns with
`reasoning_content` and `tool_calls`, tool results, final answers, plain
chat) -- and `held_out_cases()`, requests built from templates and values that
never occur in training, each with what a correct agent must do: the calls
(tool and arguments), the results to feed back, the values the answer quotes.

What it is not for: text. Rendering through the chat template and masking
happen in render.py; this module deals in messages only, so the training
data is, by construction, whatever the serving template makes of them.

Why it is shaped so: a conversation draws everything from one `random.Random`
seeded by the caller, so the corpus is a pure function of the seed. The mix
of kinds, thinking lengths, disabled or cut-short thinking and prior history
is set here in one table.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from models.demo import corpus_answers as ans
from models.demo import corpus_chat as chat
from models.demo import corpus_phrasing as ph
from models.demo import corpus_reasoning as rsn
from models.demo import corpus_values as cv
from models.demo import tools, units
from models.demo.corpus_plans import Plan, build
from models.demo.tools import TOOLS, format_number

# Share of each kind in training (weights, not probabilities).
KIND_WEIGHTS = {"weather": 14, "time": 10, "calculate": 16, "convert": 14, "weather_unknown": 3,
                "time_unknown": 2, "wdiff": 5, "wtwo": 5, "tw": 5, "wconv": 4, "chain": 6, "chat": 16, "echo": 8}
LEVEL_WEIGHTS = {rsn.SHORT: 58, rsn.MEDIUM: 32, rsn.LONG: 10}
# Sequential plans reason step by step twice as often: the step-by-step plan is what the agent loop
# test runs, and at 10% (0.5% of the corpus for chains) runs garbled it.
SEQUENTIAL_LEVEL_WEIGHTS = {rsn.SHORT: 50, rsn.MEDIUM: 30, rsn.LONG: 20}
P_SYSTEM, P_HISTORY, P_NO_THINKING, P_CUT_THINKING, P_CHAT_WITHOUT_TOOLS = 0.3, 0.08, 0.08, 0.08, 0.2
# Call turns passed back without their reasoning, as clients that drop it (and the evaluation, when it
# supplies the expected call) send them: the answer after the results must not depend on the thought.
P_DROPPED_REASONING = 0.15
SYSTEM_PROMPTS = ("You are a helpful assistant.", "You are a concise assistant. Use tools when they help.",
                  "You are a friendly assistant with access to a few tools.", "Answer briefly.")
HELD_OUT_SEED = 20250601
HELD_OUT_COUNTS = {"weather": 30, "time": 25, "calculate": 32, "convert": 25,
                   "wdiff": 8, "wtwo": 8, "tw": 8, "chain": 8}
SINGLE = ("weather", "time", "calculate", "convert", "weather_unknown", "time_unknown")


@dataclass
class Conversation:
    messages: list[dict]
    tools: list[dict] | None
    enable_thinking: bool
    kind: str
    template_ids: tuple[str, ...]  # every request's template, history included
    values: tuple[str, ...]  # every request's slot values, history included
    untrained_reasoning: frozenset[int] = frozenset()  # assistant messages whose thought was cut short
    context_only: frozenset[int] = frozenset()  # assistant messages that are context, not targets


@dataclass(frozen=True)
class ExpectedCall:
    name: str
    arguments: dict


@dataclass(frozen=True)
class Step:
    calls: tuple[ExpectedCall, ...]  # one assistant turn; several calls are made in parallel
    results: tuple[str, ...]  # tool message content to feed back, one per call, in call order


@dataclass(frozen=True)
class HeldOutCase:
    case_id: str
    kind: str
    template_id: str
    values: tuple[str, ...]
    messages: tuple[dict, ...]  # the conversation so far: one user request
    steps: tuple[Step, ...]  # empty for plain chat: no tool call is the right answer
    answer_must_contain: tuple[str, ...]


def _weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _call_turn(reasoning: str, calls: list[tuple[str, dict]], first_id: int) -> dict:
    return {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [
        {"id": f"call_{first_id + k}", "type": "function", "function": {"name": name, "arguments": args}}
        for k, (name, args) in enumerate(calls)]}


def _result_turns(results: list[str], first_id: int) -> list[dict]:
    return [{"role": "tool", "tool_call_id": f"call_{first_id + k}", "content": r} for k, r in enumerate(results)]


def _final(rng: random.Random, plan: Plan) -> tuple[str, str]:
    flat = [json.loads(r) for step in plan.results for r in step]
    s, kind = plan.slots, plan.kind
    if "error" in flat[0] and kind in SINGLE:
        what = s.get("city") or next((w for w in (s.get("from"), s.get("to")) if w and not units.lookup(w)), "")
        return ans.after_error(rng, kind.split("_")[0], what, flat[0])
    if kind == "weather":
        return ans.after_weather(rng, s["city"], flat[0])
    if kind == "time":
        return ans.after_time(rng, s["city"], flat[0])
    if kind == "calculate":
        return ans.after_calculate(rng, s["a"], s["op"], s["b"], flat[0])
    if kind == "convert":
        return ans.after_convert(rng, s["v"], s["from"], s["to"], flat[0])
    return ans.after_plan(rng, kind, s, flat)


def _plan_turns(rng: random.Random, plan: Plan, level: str, thinking: bool) -> list[dict]:
    """Assistant and tool messages that carry out `plan`, ending with the answer."""
    kind = plan.kind
    if kind in SINGLE:
        first = rsn.think_before_call(rng, kind, plan.slots, level)
    else:
        first = rsn.think_before_plan(rng, kind, plan.slots, level, plan.steps[0])
    turns, next_id = [], 0
    for i, (calls, results) in enumerate(zip(plan.steps, plan.results)):
        if i == 0:
            thought = first
        else:
            thought = ans.between_steps(rng, kind, plan.slots, [json.loads(r) for r in plan.results[0]], calls,
                                        stepwise=level == rsn.LONG)
        turns.append(_call_turn(thought if thinking else "", calls, next_id))
        turns += _result_turns(results, next_id)
        next_id += len(calls)
    thought, answer = _final(rng, plan)
    turns.append({"role": "assistant", "content": answer, "reasoning_content": thought if thinking else ""})
    return turns


def _chat_turns(rng: random.Random, split: str, thinking: bool, intent: chat.Intent | None = None
                ) -> tuple[list[dict], str, list[str]]:
    text, template_id, thought, answer, values = chat.draw(
        rng, split, rng.choice(cv.cities(split)), cv.draw_number(rng, split), intent)
    return ([{"role": "user", "content": text},
             {"role": "assistant", "content": answer, "reasoning_content": thought if thinking else ""}],
            template_id, values)


def training_conversation(rng: random.Random) -> Conversation:
    """One training conversation; everything it contains is of the training split."""
    kind = _weighted(rng, KIND_WEIGHTS)
    thinking = rng.random() >= P_NO_THINKING
    messages: list[dict] = []
    if rng.random() < P_SYSTEM:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    values: list[str] = []
    template_ids: list[str] = []
    if rng.random() < P_HISTORY:
        # An earlier exchange: the template drops its reasoning, as it does for any turn before the last query.
        old = rng.choice(["weather", "time", "calculate", "convert", "chat"])
        if old == "chat":
            turns, old_id, old_values = _chat_turns(rng, cv.TRAIN, True)
            messages += turns
            values += old_values
            template_ids.append(old_id)
        else:
            plan = build(rng, cv.TRAIN, old)
            messages += [{"role": "user", "content": plan.request}, *_plan_turns(rng, plan, rsn.SHORT, True)]
            values += plan.values
            template_ids.append(plan.template_id)
    offered = TOOLS
    cut: frozenset[int] = frozenset()
    dropped: frozenset[int] = frozenset()
    if kind in ("chat", "echo"):
        turns, template_id, new_values = _chat_turns(rng, cv.TRAIN, thinking, chat.ECHO if kind == "echo" else None)
        messages += turns
        offered = None if rng.random() < P_CHAT_WITHOUT_TOOLS else TOOLS
    else:
        plan = build(rng, cv.TRAIN, kind)
        template_id, new_values = plan.template_id, plan.values
        level = _weighted(rng, SEQUENTIAL_LEVEL_WEIGHTS if kind in rsn.SEQUENTIAL else LEVEL_WEIGHTS)
        request = plan.request
        if level == rsn.LONG:
            request += rng.choice(ph.STEPWISE[cv.TRAIN])
            template_id += "|stepwise"
        messages.append({"role": "user", "content": request})
        messages += _plan_turns(rng, plan, level, thinking)
        if thinking and rng.random() < P_DROPPED_REASONING:
            last_query = max(i for i, m in enumerate(messages) if m["role"] == "user")
            calls = [i for i, m in enumerate(messages) if i > last_query and m.get("tool_calls")]
            for i in calls:
                messages[i] = {**messages[i], "reasoning_content": ""}
            dropped = frozenset(calls)
        elif thinking and rng.random() < P_CUT_THINKING:
            # As if a reasoning budget forced </think> early: the cut thought is context, not a target.
            index = max(i for i, m in enumerate(messages) if m["role"] == "user") + 1
            words = messages[index]["reasoning_content"].split(" ")
            messages[index]["reasoning_content"] = " ".join(words[:rng.randint(0, 12)])
            cut = frozenset({index})
    return Conversation(messages, offered, thinking, kind, tuple(template_ids + [template_id]),
                        tuple(values + new_values), cut, dropped)


def training_conversations(seed: int, count: int) -> list[Conversation]:
    """`count` training conversations, a pure function of `seed`."""
    rng = random.Random(seed)
    return [training_conversation(rng) for _ in range(count)]


def _letters(rng: random.Random) -> str:
    """One to three made-up words of random letters, so the drill copies every letter piece of the
    vocabulary, not only the syllables of the echo words."""
    words, count = [], rng.randint(1, 3)
    while len(words) < count:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        if word in tools.city_table() or units.lookup(word):
            continue
        words.append(word.title() if rng.random() < 0.5 else word)
    return " ".join(words)


def _piece_words(rng: random.Random, vocab_pieces: Sequence[str]) -> str:
    """One to three words glued from one to three of the tokenizer's own letter pieces.

    Why: a held-out name is cut into the tokenizer's pieces, and many of those pieces ("Ist",
    "Kar") occur in no training text -- the merges that made them belong to longer template words.
    A piece the model never copied keeps an untrained embedding, and copying it fails (measured
    on teacher-forced held-out calls: the first piece of a name came out as a frequent word).
    Words built from the pieces themselves give every piece copying practice.
    """
    words, count = [], rng.randint(1, 3)
    while len(words) < count:
        word = "".join(rng.choice(vocab_pieces) for _ in range(rng.randint(1, 3)))
        if word.lower() in tools.city_table() or units.lookup(word):
            continue
        words.append(word)
    return " ".join(words)


def copy_drills(seed: int, count: int, pieces: int = 3, vocab_pieces: Sequence[str] = ()) -> list[Conversation]:
    """Repeat-after-me turns of `pieces` made-up words and numbers each, no tools, no thinking.

    train.py runs these first: a few-million-parameter model only starts copying unseen text (what
    every tool call needs) after a sudden change some thousand dense copy steps in; measured, the
    agent corpus alone never got there within the time budget. With `vocab_pieces` (the
    tokenizer's letter pieces), 40% of the words are glued from them (`_piece_words`).
    """
    rng = random.Random(seed)
    out = []

    def chunk() -> str:
        draw = rng.random()
        if vocab_pieces and draw < 0.4:
            return _piece_words(rng, vocab_pieces)
        if draw < (0.7 if vocab_pieces else 0.5):
            return chat.echo_text(rng, cv.TRAIN)[0]
        return _letters(rng)

    for _ in range(count):
        text = " ".join(chunk() for _ in range(pieces))
        request = rng.choice(chat.ECHO.train).format(text=text)
        out.append(Conversation([{"role": "user", "content": request},
                                 {"role": "assistant", "content": text, "reasoning_content": ""}],
                                None, False, "drill", ("chat.echo.drill",), ()))
    return out


def held_out_conversations(count: int, seed: int = HELD_OUT_SEED + 1) -> list[Conversation]:
    """Complete held-out conversations (single-call kinds, short or medium thinking, tools offered).

    Training logs teacher-forced accuracy on their tool calls: a cheap, honest signal of whether
    the model copies values it never saw, long before a full generation-based evaluation.
    """
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = ("weather", "time", "calculate", "convert")[i % 4]
        plan = build(rng, cv.HELD_OUT, kind)
        level = rsn.SHORT if i % 2 else rsn.MEDIUM
        messages = [{"role": "user", "content": plan.request}, *_plan_turns(rng, plan, level, True)]
        out.append(Conversation(messages, TOOLS, True, kind, (plan.template_id,), tuple(plan.values)))
    return out


def _must_contain(kind: str, results: list[list[str]]) -> tuple[str, ...]:
    flat = [json.loads(r) for step in results for r in step]
    n = format_number
    return {
        "weather": lambda: (n(flat[0]["temperature_c"]), flat[0]["condition"]),
        "time": lambda: (flat[0]["time"],),
        "calculate": lambda: (n(flat[0]["result"]),),
        "convert": lambda: (n(flat[0]["result"]),),
        "wdiff": lambda: (n(flat[2]["result"]),),
        "wtwo": lambda: (n(flat[0]["temperature_c"]), n(flat[1]["temperature_c"])),
        "tw": lambda: (flat[0]["time"], n(flat[1]["temperature_c"])),
        "chain": lambda: (n(flat[1]["result"]),),
    }[kind]()


def _tool_cases(rng: random.Random, wordings: str, values: str = cv.HELD_OUT) -> list[HeldOutCase]:
    """HELD_OUT_COUNTS cases of each tool kind: `values`' values in `wordings`' templates, no duplicates, none
    whose tool answers with an error (training's made-up units; held-out values never draw one)."""
    cases: list[HeldOutCase] = []
    seen: set[str] = set()
    for kind, count in HELD_OUT_COUNTS.items():
        made = 0
        while made < count:
            plan = build(rng, values, kind, wordings)
            if plan.request in seen or any("error" in json.loads(r) for step in plan.results for r in step):
                continue
            seen.add(plan.request)
            steps = tuple(Step(tuple(ExpectedCall(n, a) for n, a in calls), tuple(results))
                          for calls, results in zip(plan.steps, plan.results))
            cases.append(HeldOutCase(f"{kind}-{made:02d}", kind, plan.template_id, tuple(plan.values),
                                     ({"role": "user", "content": plan.request},), steps,
                                     _must_contain(kind, plan.results)))
            made += 1
    return cases


def seen_wording_cases(seed: int = HELD_OUT_SEED) -> list[HeldOutCase]:
    """Tool cases with values from the held-out pools (cities, numbers, units) in training wordings, drawn as
    training draws them (hand-written or composed cores, listed, composed, noise or no frames).

    Not an evaluation of the model card: the issue's held-out requests are new wordings and new values
    together. This set has the same kinds and counts, and values of the same pools with the wordings taken
    out of the question, so that probe_split.py can say how many held-out misses the new wordings cause.
    (Not the held-out cases' own values: training wordings draw more from the generator, so the draws part
    after the first case.)
    """
    return _tool_cases(random.Random(seed), cv.TRAIN)


def training_like_cases(seed: int = HELD_OUT_SEED + 2) -> list[HeldOutCase]:
    """Tool cases drawn as training draws its requests, values included (mostly made-up cities), from a seed
    of their own: what the model gets right on the distribution it was trained on (probe_split.py). Cases
    whose tool answers with an error (training's made-up units, a quarter of its conversions) are left out,
    as held-out cases have none."""
    return _tool_cases(random.Random(seed), cv.TRAIN, cv.TRAIN)


def held_out_cases(seed: int = HELD_OUT_SEED) -> list[HeldOutCase]:
    """Fixed evaluation cases: held-out templates and values only, no duplicates."""
    rng = random.Random(seed)
    cases = _tool_cases(rng, cv.HELD_OUT)
    for intent in (*chat.INTENTS, chat.ECHO):
        for k, text in enumerate(intent.held_out):
            city, number = rng.choice(cv.cities(cv.HELD_OUT)), cv.draw_number(rng, cv.HELD_OUT)
            echo, echo_values = chat.echo_text(rng, cv.HELD_OUT)
            values = ((f"city:{city.lower()}",) if "{city}" in text else ()) + (
                (f"num:{number}",) if "{number}" in text else ()) + (tuple(echo_values) if "{text}" in text else ())
            request = text.format(city=city, number=number, text=echo)
            cases.append(HeldOutCase(f"chat-{intent.name}-{k}", "chat", f"chat.{intent.name}.held_out{k}", values,
                                     ({"role": "user", "content": request},), (), ()))
    return cases
