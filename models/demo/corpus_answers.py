"""What the demo model says after a tool result: a short thought, then the answer.

What it is for: the reasoning after a tool result (or before the second
call of a sequential plan) and the final answer text, which quotes the
result's value literally ("It's 14°C and cloudy in Oslo.").

What it is not for: deciding what the values are; callers pass the parsed
tool results.

Why it is shaped so: the tool result sits right before this turn, but only
a window's worth (96 tokens) is visible to the windowed layers; a short thought that restates
the values at once, then an answer that quotes them, keeps every copy
within the window. Answers vary in wording so the model learns to copy the
value rather than memorise sentences.
"""

from __future__ import annotations

import random

from models.demo.corpus_reasoning import OP_WORDS, pending, spelled


def _pick(rng: random.Random, options: list[str], **slots) -> str:
    return rng.choice(options).format(**slots)


def after_weather(rng, city, r) -> tuple[str, str]:
    s = dict(city=r.get("city", city), t=r["temperature_c"], cond=r["condition"])
    think = _pick(rng, ["get_weather says {city} is {t}°C and {cond}.", "The result: {t}°C and {cond} in {city}.",
                        "{city}: {t} degrees Celsius, {cond}. I can answer now."], **s)
    answer = _pick(rng, ["It's currently {t}°C and {cond} in {city}.", "In {city} it's {t}°C and {cond} right now.",
                         "Right now {city} has {cond} weather at {t}°C.", "The weather in {city}: {t}°C, {cond}.",
                         "{city} is at {t}°C with {cond} conditions."], **s)
    return think, answer


def after_time(rng, city, r) -> tuple[str, str]:
    s = dict(city=r.get("city", city), time=r["time"], day=r["day"])
    think = _pick(rng, ["get_time says it is {time} on {day} in {city}.", "The result: {time}, {day}, in {city}.",
                        "It's {time} in {city}. I can answer."], **s)
    answer = _pick(rng, ["It's {time} in {city} right now ({day}).", "The local time in {city} is {time} on {day}.",
                         "In {city} it is currently {time}, {day}.", "Right now it's {day}, {time} in {city}."], **s)
    return think, answer


def after_calculate(rng, a, op, b, r) -> tuple[str, str]:
    s = dict(a=a, op=op, b=b, r=r["result"], desc=OP_WORDS[op]["desc"].format(a=a, b=b))
    think = _pick(rng, ["The calculator returned {r}.", "calculate gives {a} {op} {b} = {r}.",
                        "The result is {r}. I can answer."], **s)
    answer = _pick(rng, ["{a} {op} {b} = {r}.", "The answer is {r}.", "{a} {op} {b} is {r}.",
                         "That comes to {r}.", "It's {r}: {desc}."], **s)
    return think, answer


def after_convert(rng, v, f, t, r) -> tuple[str, str]:
    s = dict(v=v, f=f, t=t, r=r["result"])
    think = _pick(rng, ["The converter says {v} {f} is {r} {t}.", "convert_units returned {r}.",
                        "The result is {r} {t}. I can answer."], **s)
    answer = _pick(rng, ["{v} {f} is {r} {t}.", "That's {r} {t}.", "{v} {f} comes to about {r} {t}.",
                         "{v} {f} = {r} {t}."], **s)
    return think, answer


def after_error(rng, kind, what, r) -> tuple[str, str]:
    """A tool said it does not know `what` (an unknown city or unit): say so, do not invent."""
    s = dict(what=what, err=r["error"])
    think = _pick(rng, ["The tool returned an error: {err}. I shouldn't make anything up.",
                        "No data for {what}. I'll tell the user."], **s)
    if kind == "convert":
        answer = _pick(rng, ["Sorry, the converter doesn't know the unit {what}.",
                             "I can't convert that: {what} is not a unit the converter knows."], **s)
        return think, answer
    topic = "weather data" if kind == "weather" else "a time zone"
    answer = _pick(rng, ["Sorry, I couldn't find {topic} for {what}.",
                         "I don't have {topic} for {what}, so I can't answer that one.",
                         "The tool has no {topic} for {what}. Could you try a nearby larger city?"],
                   topic=topic, **s)
    return think, answer


def between_steps(rng, kind, slots, results, calls: list[tuple[str, dict]], stepwise: bool = False) -> str:
    """Thought after the first results of a sequential plan, before the second step's `calls`, which
    its last sentence spells out. A `stepwise` plan (the user asked for step-by-step reasoning) goes
    on thinking in numbered steps here too, some 180 tokens: a second turn that thinks past the
    96-token window is what the agent loop needs to show its tool-call anchor at work. It opens with
    the first turn's `pending` step, which also says whether the plan goes step by step."""
    s = _first_results(kind, slots, results)
    opening = pending(kind, slots, stepwise)  # the first turn's thought ended with it (corpus_reasoning.pending)
    if not stepwise:
        return f"{opening} " + _pick(rng, _BETWEEN[kind], **s) + f" Calling {spelled(calls)}."
    lines, second = _NUMBERED_BETWEEN[kind]
    steps = [line.format(**s) for line in lines] + ["I shouldn't guess the value; the tool gives the exact result."]
    body = "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))
    return (f"{opening} Let me go on step by step.\n{body}\nTo confirm: {second.format(**s)} is the second step.\n"
            f"Calling {spelled(calls)}.")


def _first_results(kind, slots, results) -> dict:
    """The plan's slots plus what its first step returned: t1, t2 (wdiff), t (wconv) or r1 (chain)."""
    if kind == "wdiff":
        return dict(slots, t1=results[0]["temperature_c"], t2=results[1]["temperature_c"])
    if kind == "wconv":
        return dict(slots, t=results[0]["temperature_c"])
    if kind == "chain":
        return dict(slots, r1=results[0]["result"])
    raise ValueError(kind)


_BETWEEN = {
    "wdiff": ["{c1} is {t1}°C and {c2} is {t2}°C. Now I'll compute {t1} - {t2} with calculate.",
              "Temperatures: {c1} {t1}°C, {c2} {t2}°C. The difference is {t1} - {t2}."],
    "wconv": ["{city} is at {t} celsius. Now convert {t} celsius to {to}.",
              "get_weather gives {t}°C for {city}. Next: convert_units from celsius to {to}."],
    "chain": ["{a} {op1} {b} = {r1}. Now {r1} {op2} {c}.", "The first result is {r1}. Second step: {r1} {op2} {c}."],
}
# Numbered steps of a step-by-step plan between its steps, and how its "To confirm" line names the second step.
_NUMBERED_BETWEEN = {
    "wdiff": (["{c1} is {t1}°C.", "{c2} is {t2}°C.",
               "The difference is {t1} - {t2}, and calculate gives it exactly."], "{t1} - {t2}"),
    "wconv": (["get_weather says {city} is at {t}°C.",
               "The user wants it in {to}, so the next step converts {t} celsius to {to}.",
               "convert_units does that conversion exactly."], "{t} celsius to {to}"),
    "chain": (["The first result is {r1}: {a} {op1} {b} = {r1}.", "What is left is {r1} {op2} {c}.",
               "calculate does one operation at a time, so this needs one more call."], "{r1} {op2} {c}"),
}


def after_plan(rng, kind, slots, results) -> tuple[str, str]:
    """Thought and answer once every call of a two-call plan has returned."""
    if kind == "wdiff":
        t1, t2 = results[0]["temperature_c"], results[1]["temperature_c"]
        d = results[2]["result"]
        s = dict(t1=t1, t2=t2, d=d, **slots)
        return (_pick(rng, ["The difference is {d} degrees.", "{t1} - {t2} = {d}."], **s),
                _pick(rng, ["{c1} is {t1}°C and {c2} is {t2}°C, a difference of {d} degrees.",
                            "The temperature difference ({c1} minus {c2}) is {d}°C: {t1}°C versus {t2}°C."], **s))
    if kind == "wtwo":
        a, b = results
        s = dict(t1=a["temperature_c"], k1=a["condition"], t2=b["temperature_c"], k2=b["condition"], **slots)
        return (_pick(rng, ["{c1}: {t1}°C, {k1}. {c2}: {t2}°C, {k2}.", "Both results are in: {t1}°C and {t2}°C."],
                      **s),
                _pick(rng, ["In {c1} it's {t1}°C and {k1}; in {c2} it's {t2}°C and {k2}.",
                            "{c1}: {t1}°C, {k1}. {c2}: {t2}°C, {k2}."], **s))
    if kind == "tw":
        clock, weather = results
        s = dict(time=clock["time"], day=clock["day"], t=weather["temperature_c"], k=weather["condition"], **slots)
        return (_pick(rng, ["It's {time} in {city}, and {t}°C and {k}.", "Time {time}; weather {t}°C, {k}."], **s),
                _pick(rng, ["In {city} it's {time} ({day}), and the weather is {t}°C and {k}.",
                            "It's {time} in {city} right now; the weather is {k} at {t}°C."], **s))
    if kind == "wconv":
        s = dict(t=results[0]["temperature_c"], r=results[1]["result"], **slots)
        return (_pick(rng, ["{t}°C is {r} {to}.", "The converted value is {r}."], **s),
                _pick(rng, ["It's {r} {to} in {city} ({t}°C).", "{city} is at {r} {to} right now."], **s))
    if kind == "chain":
        s = dict(r1=results[0]["result"], r=results[1]["result"], **slots)
        return (_pick(rng, ["The final result is {r}.", "{r1} {op2} {c} = {r}."], **s),
                _pick(rng, ["({a} {op1} {b}) {op2} {c} = {r}.", "The answer is {r}.",
                            "First {a} {op1} {b} = {r1}, then {r1} {op2} {c} = {r}."], **s))
    raise ValueError(kind)
