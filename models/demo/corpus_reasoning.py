"""Thinking text the demo model learns to write before it acts.

What it is for: the `reasoning_content` of an assistant turn that calls a
tool, at three lengths -- short (one or two sentences), medium (a few), long
(numbered step-by-step reasoning, 150-300 tokens).

What it is not for: thinking after a tool result, or answers
(corpus_answers.py).

Why it is shaped so: every sentence restates the values the call needs
(city, numbers, units). The checkpoint's windowed layers see only 96
tokens back (64 before this checkpoint), so a value must reappear every few
dozen tokens to be copyable into the tool call that ends a long thought. The last sentence
always names the call, right before `</think>`.
"""

from __future__ import annotations

import json
import random

SHORT, MEDIUM, LONG = "short", "medium", "long"

OP_WORDS = {
    "+": {"name": "addition", "desc": "the sum of {a} and {b}", "verb": "add {a} and {b}"},
    "-": {"name": "subtraction", "desc": "{a} minus {b}", "verb": "subtract {b} from {a}"},
    "*": {"name": "multiplication", "desc": "the product of {a} and {b}", "verb": "multiply {a} by {b}"},
    "/": {"name": "division", "desc": "{a} divided by {b}", "verb": "divide {a} by {b}"},
}


def _pools(kind: str, s: dict[str, str]) -> dict[str, list[str]]:
    """Sentence pools per role (goal, choose, args, extra) for one kind of single call.

    The "args" sentence, always the last of a thought, spells the call's arguments as the JSON the
    call will carry: the call that follows is then a verbatim repeat of text a few tokens back,
    which a small model does reliably once it can copy (see train.py's copy drill).
    """
    if kind in ("weather", "weather_unknown"):
        return {
            "goal": ["The user wants the weather in {city}.", "This is a weather question about {city}.",
                     "They're asking how the weather is in {city}.", "The user asks about conditions in {city}."],
            "choose": ["I can't know live weather myself, so I'll use get_weather for {city}.",
                       "get_weather returns the temperature and condition for a city, which fits {city}.",
                       "The right tool is get_weather; it takes a city, here {city}."],
            "args": ['I\'ll call get_weather with {{"city": "{city}"}}.', 'Call get_weather: {{"city": "{city}"}}.',
                     'So: get_weather, {{"city": "{city}"}}.'],
            "extra": ["The city name is {city}; I'll pass it exactly as written.",
                      "Only one city is mentioned, {city}, so one call is enough.",
                      "The tool reports Celsius for {city}, and no other unit was asked for, so no conversion.",
                      "Once I have the result for {city}, I'll report the temperature and the condition.",
                      "I shouldn't guess the weather in {city}; without the tool I have no live data.",
                      "calculate, convert_units and get_time don't answer a weather question about {city}."],
        }
    if kind in ("time", "time_unknown"):
        return {
            "goal": ["The user wants the time in {city}.", "This is a question about the time in {city}.",
                     "They're asking what time it is in {city}."],
            "choose": ["I don't have a clock for {city}, so I'll use get_time.",
                       "get_time gives the current local time for a city, here {city}.",
                       "The right tool is get_time with the city {city}."],
            "args": ['I\'ll call get_time with {{"city": "{city}"}}.', 'Call get_time: {{"city": "{city}"}}.',
                     'So: get_time, {{"city": "{city}"}}.'],
            "extra": ["The city is {city}; the tool works out its time zone, so I just pass {city}.",
                      "Only {city} is mentioned, so one call is enough.",
                      "I must not guess the time in {city}; it depends on the current moment.",
                      "When the result comes back, I'll give the time in {city} and the day.",
                      "The weather isn't asked for, only the time in {city}."],
        }
    if kind == "calculate":
        w = {k: v.format(**s) for k, v in OP_WORDS[s["op"]].items()}
        return {
            "goal": ["The user wants {a} {op} {b}.", "This is arithmetic: {a} {op} {b}.",
                     f"They're asking for {w['desc']}.", f"I need to {w['verb']}."],
            "choose": ["I'll use the calculate tool so the result is exact.",
                       "calculate takes a, op and b: a = {a}, op = {op}, b = {b}.",
                       f"This is {w['name']}, which calculate does with op {{op}}."],
            "args": ['I\'ll call calculate with {{"a": {a}, "op": "{op}", "b": {b}}}.',
                     'Call calculate: {{"a": {a}, "op": "{op}", "b": {b}}}.',
                     'So: calculate, {{"a": {a}, "op": "{op}", "b": {b}}}.'],
            "extra": [f"The first number is {{a}} and the second is {{b}}; the order matters for {w['name']}.",
                      f"The operation is {w['name']}, which is op {{op}}.",
                      "Both numbers, {a} and {b}, are written plainly, so I pass them as they are.",
                      "After the result comes back, I'll state {a} {op} {b} and its value.",
                      "Doing {a} {op} {b} in my head could go wrong, so the tool is safer.",
                      f"For {w['name']}, a is {{a}} and b is {{b}}."],
        }
    if kind == "convert":
        return {
            "goal": ["The user wants {v} {from} in {to}.", "This is a unit conversion: {v} {from} to {to}.",
                     "They're asking how much {v} {from} is in {to}."],
            "choose": ["convert_units does this; it takes value, from_unit and to_unit.",
                       "I'll use convert_units for {v} {from} to {to}.",
                       "The conversion factor is easy to get wrong, so convert_units it is."],
            "args": ['I\'ll call convert_units with {{"value": {v}, "from_unit": "{from}", "to_unit": "{to}"}}.',
                     'Call convert_units: {{"value": {v}, "from_unit": "{from}", "to_unit": "{to}"}}.',
                     'So: convert_units, {{"value": {v}, "from_unit": "{from}", "to_unit": "{to}"}}.'],
            "extra": ["The value is {v} and the source unit is {from}.", "The target unit is {to}.",
                      "I'll pass the unit names as the user wrote them: {from} and {to}.",
                      "When the result comes back I'll report {v} {from} in {to}.",
                      "The number to convert is {v}; it stays as written.",
                      "{from} and {to} measure the same kind of quantity, so the conversion makes sense."],
        }
    raise ValueError(kind)


def _fill(sentence: str, slots: dict[str, str]) -> str:
    return sentence.format(**slots)


def think_before_call(rng: random.Random, kind: str, slots: dict[str, str], level: str) -> str:
    """Reasoning before a single tool call of `kind`."""
    pools = {role: [_fill(x, slots) for x in xs] for role, xs in _pools(kind, slots).items()}
    pick = rng.choice
    # Short and medium thoughts open with the kind's first goal and close with its first args sentence:
    # one wording for the two decisions (which tool, which values), so the model learns them rather
    # than spreading them over paraphrases. The variety lives in the middle and in long thoughts.
    goal, args = pools["goal"][0], pools["args"][0]
    if level == SHORT:
        return f"{goal} {args}"
    if level == MEDIUM:
        extras = rng.sample(pools["extra"], rng.randint(0, 2))
        return " ".join([goal, pick(pools["choose"]), *extras, args])
    steps = [pick(pools["goal"]), pick(pools["choose"]), *rng.sample(pools["extra"], len(pools["extra"]))]
    opener = rng.choice(["Let me think this through step by step.", "Let me work through this carefully.",
                         "Step by step:"])
    body = "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))
    check = rng.choice(["Let me double-check: ", "Checking again: ", "To confirm: "]) + pick(pools["goal"])
    return f"{opener}\n{body}\n{check}\n{pick(pools['args'])}"


def spelled(calls: list[tuple[str, dict]]) -> str:
    """The calls as the thought names them right before making them: `get_weather with {"city": "Oslo"}`,
    joined by "and" -- the JSON the calls will carry, so each call repeats text a few tokens back."""
    return " and ".join(f"{name} with {json.dumps(args, ensure_ascii=False)}" for name, args in calls)


# The second step of a sequential plan, as the first turn's thought ends and the second turn's begins.
_PENDING = {"wdiff": "Then the difference", "chain": "Then {op2} {c}", "wconv": "Then convert to {to}"}
# The plans whose second step waits for the first results: the ones with a pending step.
SEQUENTIAL = frozenset(_PENDING)


def pending(kind: str, slots: dict[str, str], stepwise: bool = False) -> str:
    """What a sequential plan does once its first results are in ("Then * 71."): the last sentence of
    the first turn's thought, after the calls it spells, and the first of the second turn's.

    Why there: the second turn starts some 65 (a chain) to 120 (two weather results) tokens after the
    first turn's thought ends, past the reach of a 64-token window, and the checkpoint that kept the
    plan earlier in the thought never learnt a second step (0 of 45 training-distribution chains and
    temperature differences): it answered after the first results, or took the first call's own
    operand. Last in the thought, the plan is as close to the second turn as it can be, and the
    second turn opens by repeating it. A plan reasoned out step by step says so there too ("Then * 2,
    in numbered points."): the second turn's numbered thought is chosen by what it can see. (Not in
    the words "step by step": the thought opens with them, and a model that copies what followed
    their last occurrence starts its numbered list again -- measured, a looping first thought.)
    """
    return _PENDING[kind].format(**slots) + (", in numbered points." if stepwise else ".")


def think_before_plan(rng: random.Random, kind: str, slots: dict[str, str], level: str,
                      calls: list[tuple[str, dict]]) -> str:
    """Reasoning before the first turn of a two-call plan (parallel or sequential); `calls` are that
    turn's calls, which its last sentence spells out (as a single call's thought does)."""
    s = slots
    if kind == "wdiff":
        goal = f"The user wants the temperature difference between {s['c1']} and {s['c2']}."
        plan = (f"First I need both temperatures, so I'll call get_weather for {s['c1']} and for {s['c2']} "
                f"at once. Then I'll subtract {s['c2']}'s temperature from {s['c1']}'s with calculate.")
        act = f"Calling {spelled(calls)}. {pending(kind, s, level == LONG)}"
    elif kind == "wtwo":
        goal = f"The user wants the weather in two cities: {s['c1']} and {s['c2']}."
        plan = f"get_weather takes one city, so I'll make two calls in one go: {s['c1']} and {s['c2']}."
        act = f"Calling {spelled(calls)}."
    elif kind == "tw":
        goal = f"The user wants both the local time and the weather in {s['city']}."
        plan = f"That's two tools for the same city: get_time for {s['city']} and get_weather for {s['city']}."
        act = f"I'll call both now: {spelled(calls)}."
    elif kind == "wconv":
        goal = f"The user wants the temperature in {s['city']}, expressed in {s['to']}."
        plan = (f"get_weather gives Celsius for {s['city']}; after that I'll convert the value "
                f"from celsius to {s['to']} with convert_units.")
        act = (f"The conversion to {s['to']} comes second. First step: {spelled(calls)}. "
               f"{pending(kind, s, level == LONG)}")
    elif kind == "chain":
        w1, w2 = OP_WORDS[s["op1"]]["name"], OP_WORDS[s["op2"]]["name"]
        goal = f"The user wants ({s['a']} {s['op1']} {s['b']}) {s['op2']} {s['c']}: {w1} first, then {w2}."
        plan = (f"calculate does one operation at a time, so first {s['a']} {s['op1']} {s['b']}, "
                f"then the result {s['op2']} {s['c']}.")
        act = f"First call: {spelled(calls)}. {pending(kind, s, level == LONG)}"
    else:
        raise ValueError(kind)
    if level == SHORT:
        return f"{goal} {act}"
    if level == MEDIUM:
        return f"{goal} {plan} {act}"
    return (f"Let me plan this step by step.\n1. {goal}\n2. {plan}\n"
            f"3. I shouldn't guess any of these values; the tools give exact results.\n"
            f"4. {goal.replace('The user wants', 'Again, the goal is')}\n{act}")
