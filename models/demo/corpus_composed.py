"""Training request cores composed from parts, for many more phrasings than a hand-written list.

What it is for: `composed_core(rng, kind, op)` -- a training core for a kind of request (the four
single calls, and the two-call plans but wconv), assembled from a form (where the slots sit) and
one choice per part (an opening, a topic phrase, a link word before the slot, a time word after
it). Tens of thousands of distinct cores, against two to forty hand-written ones per kind in
corpus_phrasing.

What it is not for: held-out requests (always hand-written, corpus_phrasing).

Why it is shaped so: the checkpoint's held-out misses were phrasing misses -- a frame word or the
word after a city copied as the city ("me", "Caracas at"), a multiplication read as a division, a
time question routed to the weather -- while the values themselves were copied well. A toy model
learns which neighbours of a slot to ignore, and which word picks the tool, only from seeing the
slot among many neighbours; a list it can memorise does not teach that. The parts are everyday
English chosen without the held-out cores' wordings (their words, yes: corpus_phrasing says why),
and a composed core whose text equals a
hand-written core of either split (case and punctuation aside) is drawn again, so a held-out
template never occurs in training.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from models.demo import corpus_phrasing as ph

# A form is a format string over part names; each part is a tuple of choices. "{city}", "{a}"... are
# the request's slots and stay as they are.
_WHEN = ("", "", " now", " today", " right now", " currently", " this morning", " this afternoon", " tonight",
         " at present", " these days", " this evening")
# " for me" after a slot: "for" is also a link word before a city ("the weather for {city}"), and
# measured, the checkpoint copied "me" as the city, or "oz for me" as the unit.
_END = ("?", "?", ".", "", " for me.", " for me?")

_WEATHER_PARTS = {
    "ask": ("what's", "what is", "tell me", "give me", "show me", "get me", "check", "I'd like", "I want",
            "I need", "can you check", "could you tell me", "please give me", "report", "find", "any news on",
            "do you know", "let me know", "any idea of"),
    "topic": ("the weather", "the temperature", "the current weather", "the conditions", "the weather report",
              "the forecast", "today's weather", "the temperature outside", "the current temperature",
              "the weather situation", "the sky"),
    "noun": ("weather", "temperature", "forecast", "current weather", "conditions today", "weather report"),
    "link": ("in", "in", "for", "at", "over in", "around"),
    "adj": ("hot", "warm", "cold", "chilly", "sunny", "rainy", "windy", "cloudy", "freezing", "humid", "foggy",
            "stormy", "wet", "dry", "mild", "cool"),
    "be": ("is it", "is it very", "is it really", "is it still", "is it getting"),
    "who": ("friend", "sister", "brother", "mum", "dad", "cousin", "aunt", "uncle", "boss", "colleague"),
}
_WEATHER_FORMS = (
    "{ask} {topic} {link} {{city}}{when}{end}",
    "{topic} {link} {{city}}{when}{end}",
    "{ask} {{city}}'s {noun}{when}{end}",
    "{{city}}'s {noun}{when}{end}",
    "{be} {adj} {link} {{city}}{when}?",
    "{{city}}{when}: {topic}?",
    "{noun} {link} {{city}}{when}{end}",
    "in {{city}}{when}, {ask} {topic}{end}",
    "{ask} {topic} where my {who} lives, in {{city}}{end}",
)

_TIME_PARTS = {
    "ask": _WEATHER_PARTS["ask"],
    "topic": ("the time", "the local time", "the current time", "the time of day", "the exact time",
              "the current local time", "the hour", "the clock", "the time right now"),
    "noun": ("time", "local time", "current time", "clock", "time of day", "hour"),
    "link": _WEATHER_PARTS["link"],
    "adj": ("late", "early", "morning", "evening", "night", "midday", "afternoon", "past midnight", "lunchtime",
            "daytime"),
    "be": ("is it", "is it already", "is it still", "is it nearly"),
    "who": _WEATHER_PARTS["who"],
}
_TIME_FORMS = (
    "{ask} {topic} {link} {{city}}{when}{end}",
    "{topic} {link} {{city}}{when}{end}",
    "{ask} {{city}}'s {noun}{when}{end}",
    "{{city}}'s {noun}{when}{end}",
    "{be} {adj} {link} {{city}}{when}? What time is it?",
    "what time is it {link} {{city}}{when}{end}",
    "{{city}}{when}: {topic}?",
    "{noun} {link} {{city}}{when}{end}",
    "in {{city}}{when}, {ask} {topic}{end}",
    "what time do they have {link} {{city}}{when}{end}",
    "{ask} {topic} where my {who} lives, in {{city}}{end}",
)

# Calculations: an expression or an instruction per operator, inside a wrapper. Argument order is
# part of each phrase ("subtract {b} from {a}").
_EXPRESSIONS = {
    "+": ("{a} plus {b}", "{a} + {b}", "the sum of {a} and {b}", "the total of {a} and {b}",
          "{a} and {b} added together", "{a} added to {b}", "{a} increased by {b}"),
    "-": ("{a} minus {b}", "{a} - {b}", "{a} less {b}", "the difference between {a} and {b}",
          "{b} subtracted from {a}", "{a} reduced by {b}", "{a} decreased by {b}", "{b} deducted from {a}"),
    "*": ("{a} times {b}", "{a} * {b}", "{a} multiplied by {b}", "the product of {a} and {b}",
          "{a} lots of {b}", "{a} multiplied with {b}"),
    "/": ("{a} divided by {b}", "{a} / {b}", "{a} over {b}", "the quotient of {a} and {b}",
          "{a} divided into {b} equal parts", "{a} shared by {b}"),
}
_INSTRUCTIONS = {
    "+": ("add {a} and {b}", "add {a} to {b}", "add up {a} and {b}", "total {a} and {b}", "increase {a} by {b}"),
    "-": ("subtract {b} from {a}", "deduct {b} from {a}", "remove {b} from {a}", "take {b} off {a}",
          "decrease {a} by {b}", "reduce {a} by {b}",
          "find what is left of {a} after taking off {b}"),
    "*": ("multiply {a} by {b}", "multiply {a} and {b}", "multiply {a} with {b}", "times {a} by {b}"),
    "/": ("divide {a} by {b}", "split {a} into {b} parts", "divide {a} into {b} parts", "share {a} by {b}"),
}
_EXPRESSION_WRAPS = ("what's {e}?", "what is {e}?", "how much is {e}?", "calculate {e}", "compute {e}",
                     "tell me {e}.", "give me {e}", "find {e}", "{e}?", "{e} equals what?", "solve {e}",
                     "evaluate {e}", "I need {e}", "quick: {e}", "what does {e} come to?", "what's the answer to {e}?",
                     "what do you get for {e}?", "the result of {e}?", "I'd like to know {e}.",
                     "can you tell me {e}?", "{e}, please")
_INSTRUCTION_WRAPS = ("{i}.", "please {i}.", "can you {i}?", "could you {i}?", "{i} and tell me the result.",
                      "I need you to {i}.", "go ahead and {i}.", "{i}, what's the result?", "help me {i}.",
                      "{i}", "now {i}.", "{i} please", "would you {i}?", "{i} for me?")

_CONVERT_PARTS = {
    "verb": ("convert", "turn", "switch", "translate", "convert", "put", "recalculate", "redo"),
    "into": ("into", "to", "in", "as"),
    "ask": ("what's", "what is", "how much is", "tell me", "give me", "show me", "I need", "find",
            "what do I get for", "work me out"),
    "many": ("how many {to} is", "how many {to} are", "how many {to} make", "how many {to} in",
             "how many {to} do I get from", "how many {to} fit in"),
}
_CONVERT_FORMS = (
    "{verb} {{v}} {{from}} {into} {{to}}{end}",
    "please {verb} {{v}} {{from}} {into} {{to}}{end}",
    "{ask} {{v}} {{from}} in {{to}}{end}",
    "{many} {{v}} {{from}}?",
    "{{v}} {{from}} in {{to}}{end}",
    "{{v}} {{from}} as {{to}}{end}",
    "{{v}} {{from}} in terms of {{to}}{end}",
    "{{v}} {{from}}: how many {{to}}?",
    "in {{to}}, {ask} {{v}} {{from}}?",
    "{{v}} {{from}}, what's that in {{to}}?",
    "{{v}} {{from}} {into} {{to}}, please",
    "can you {verb} {{v}} {{from}} {into} {{to}}?",
    # "express" and "change" (held-out convert verbs) in constructions of their own, as for wdiff below.
    "I'd like {{v}} {{from}} expressed as {{to}}{end}",
    "{{v}} {{from}}, changed to {{to}}?",
    "{{v}} {{from}}: express that as {{to}}{end}",
    "change the units of {{v}} {{from}} to {{to}}{end}",
    "{{v}} {{from}} measured in {{to}}{end}",
)


# Two-call requests (corpus_plans: wdiff computes c1 minus c2, tw calls get_time then get_weather).
_TWO_PARTS = {
    "ask": _WEATHER_PARTS["ask"],
    "warmer": ("warmer", "hotter"),
}
_TWO_FORMS = {
    "wdiff": (
        "{ask} the temperature difference between {{c1}} and {{c2}}{when}{end}",
        "{ask} how much {warmer} {{c1}} is than {{c2}}{when}{end}",
        "how many degrees {warmer} is {{c1}} than {{c2}}{when}?",
        "{{c1}} vs {{c2}}: temperature difference{when}?",
        "what's the difference in temperature between {{c1}} and {{c2}}{when}?",
        "by how much does {{c1}}'s temperature differ from {{c2}}'s{when}?",
        "{ask} the difference between the temperatures of {{c1}} and {{c2}}{end}",
        "{{c1}} minus {{c2}}, in degrees{when}?",
        # Words a held-out wdiff core leans on ("gap", "separate"), in constructions of their own: a
        # toy model cannot learn a word it was never shown (corpus_phrasing). So for every held-out
        # core's words below ("idea", "lives", "left", "measured", "each", "before", ...).
        "{ask} the gap in temperature from {{c1}} to {{c2}}{when}{end}",
        "what separates {{c1}} from {{c2}} in temperature{when}?",
        "how far apart are {{c1}} and {{c2}} in degrees{when}?",
        "how much temperature would separate {{c1}} from {{c2}}{when}?",
    ),
    "wtwo": (
        "{ask} the weather in {{c1}} and {{c2}}{when}{end}",
        "{ask} the weather for {{c1}} and for {{c2}}{end}",
        "weather: {{c1}} and {{c2}}{when}{end}",
        "{{c1}} and {{c2}} weather{when}{end}",
        "how's the weather in {{c1}} and {{c2}}{when}?",
        "what's it like in {{c1}} and in {{c2}}{when}?",
        "{ask} the temperatures in {{c1}} and {{c2}}{end}",
        "{{c1}} weather and {{c2}} weather{when}{end}",
        "compare the weather in {{c1}} and {{c2}}{when}{end}",
        "{ask} the weather in each of {{c1}} and {{c2}}{end}",
        "choosing a trip, {{c1}} or {{c2}}: {ask} the weather in both{end}",
    ),
    "tw": (
        "{ask} the time and the weather in {{city}}{when}{end}",
        "{ask} the weather and the local time in {{city}}{end}",
        "time and temperature for {{city}}{when}{end}",
        "{{city}}: time and weather{when}?",
        "{{city}}'s local time and weather{end}",
        "what time is it in {{city}}, and how warm is it{when}?",
        "local time plus weather for {{city}}{end}",
        "clock and forecast for {{city}}{when}{end}",
        "before I travel to {{city}}, {ask} the time and the weather there{end}",
    ),
}
# Chains: a first instruction on {a} and {b}, then a second on the result with {c}; ops as CALC_CHAIN's.
_THEN = {
    "*": ("multiply the result by {c}", "times that by {c}", "multiply it by {c}", "multiply that by {c}"),
    "-": ("subtract {c}", "take {c} off the result", "subtract {c} from that", "deduct {c} from it"),
    "/": ("divide the result by {c}", "divide that by {c}", "divide it by {c}", "split the result into {c} parts"),
}
_CHAIN_WRAPS = ("{i1}, then {i2}.", "first {i1}, then {i2}.", "{i1}; after that {i2}.", "{i1}. Next, {i2}.",
                "please {i1}, then {i2}.", "can you {i1} and {i2}?", "{i1}, and {i2}.")


def _normal(text: str) -> str:
    """Core text with case, punctuation and spacing ignored: what "the same template" means here."""
    return " ".join(re.sub(r"[^\w{}']+", " ", text.lower()).split())


@lru_cache(maxsize=1)
def _hand_written() -> frozenset[str]:
    cores = (*ph.WEATHER, *ph.TIME, *ph.CALC, *ph.CONVERT, *ph.WEATHER_DIFF, *ph.WEATHER_TWO, *ph.TIME_WEATHER,
             *ph.WEATHER_CONVERT, *ph.CALC_CHAIN)
    return frozenset(_normal(c.text) for c in cores)


def _capitalised(text: str) -> str:
    """A sentence's first letter upper-cased (a slot at the start stays as the user typed it)."""
    return text if text.startswith("{") else text[0].upper() + text[1:]


def _fill(rng: random.Random, form: str, parts: dict[str, tuple[str, ...]]) -> tuple[str, str]:
    """The form with one choice per part; the id names the form's choices by index."""
    picks, ids = {}, []
    for name in re.findall(r"(?<!{){(\w+)}(?!})", form):  # part names; "{{city}}" is a slot, not a part
        choices = parts.get(name) or {"when": _WHEN, "end": _END}[name]
        k = rng.randrange(len(choices))
        picks[name] = choices[k]
        ids.append(f"{name[0]}{k}")
    return _capitalised(form.format(**picks)), ".".join(ids)


def _draw(rng: random.Random, kind: str, op: str | None) -> tuple[str, str]:
    if kind in ("weather", "time"):
        forms, parts = (_WEATHER_FORMS, _WEATHER_PARTS) if kind == "weather" else (_TIME_FORMS, _TIME_PARTS)
        f = rng.randrange(len(forms))
        text, ids = _fill(rng, forms[f], parts)
        return text, f"f{f}.{ids}"
    if kind == "calculate":
        if rng.random() < 0.5:
            e, w = rng.randrange(len(_EXPRESSIONS[op])), rng.randrange(len(_EXPRESSION_WRAPS))
            text = _EXPRESSION_WRAPS[w].replace("{e}", _EXPRESSIONS[op][e])
            ids = f"e{e}.w{w}"
        else:
            i, w = rng.randrange(len(_INSTRUCTIONS[op])), rng.randrange(len(_INSTRUCTION_WRAPS))
            text = _INSTRUCTION_WRAPS[w].replace("{i}", _INSTRUCTIONS[op][i])
            ids = f"i{i}.w{w}"
        return _capitalised(text), ids
    if kind in _TWO_FORMS:
        f = rng.randrange(len(_TWO_FORMS[kind]))
        text, ids = _fill(rng, _TWO_FORMS[kind][f], _TWO_PARTS)
        return text, f"f{f}.{ids}"
    if kind == "chain":
        i, t, w = (rng.randrange(len(_INSTRUCTIONS[op[0]])), rng.randrange(len(_THEN[op[1]])),
                   rng.randrange(len(_CHAIN_WRAPS)))
        text = _CHAIN_WRAPS[w].replace("{i1}", _INSTRUCTIONS[op[0]][i]).replace("{i2}", _THEN[op[1]][t])
        return _capitalised(text), f"i{i}.t{t}.w{w}"
    if kind == "convert":
        f = rng.randrange(len(_CONVERT_FORMS))
        text, ids = _fill(rng, _CONVERT_FORMS[f], _CONVERT_PARTS)
        return text, f"f{f}.{ids}"
    raise ValueError(f"no composed cores for {kind!r}")


def composed_core(rng: random.Random, kind: str, op: str | None = None) -> ph.Core:
    """A training core of `kind` ("weather", "time", "calculate" with its `op`, "convert", "wdiff",
    "wtwo", "tw", "chain" with its pair of ops), never the text of a hand-written core of either split.
    A chain without `op` draws its pair from the hand-written chains' pairs."""
    if kind == "chain" and op is None:
        op = rng.choice(sorted({c.op for c in ph.CALC_CHAIN}))
    while True:
        text, ids = _draw(rng, kind, op)
        if _normal(text) not in _hand_written():
            name = f"chain{op}" if kind == "chain" else {"+": "add", "-": "sub", "*": "mul", "/": "div"}.get(
                op or "", kind)
            return ph.Core(f"{name}.c.{ids}", text, ph.TRAIN, op)
