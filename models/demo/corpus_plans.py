"""Plans: one synthetic request with the tool calls that answer it, executed for real.

What it is for: choosing a request (template + values of one split), the
calls it needs step by step, and the real results of those calls (tools.py).
A plan is split-agnostic data; corpus.py turns it into training messages or
into a held-out case with expectations.

What it is not for: wording of thoughts and answers (corpus_reasoning.py,
corpus_answers.py).

Why it is shaped so: a sequential plan's second call depends on the first
result, so calls are executed while the plan is built; the results the model
trains on and the results the evaluation feeds back come from the same code.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime

from models.demo import corpus_phrasing as ph
from models.demo import corpus_values as cv
from models.demo import tools
from models.demo.corpus_composed import composed_core
from models.demo.units import lookup

# Training requests about a city name a made-up one this often, and a conversion names a made-up
# unit this often (corpus_values explains why).
P_MADE_UP_CITY, P_MADE_UP_UNIT, P_BOTH_UNITS_MADE_UP = 0.7, 0.25, 0.4
# Training requests (but wconv's) take a composed core (corpus_composed says why) this often.
P_COMPOSED_CORE = 0.5


@dataclass
class Plan:
    kind: str
    request: str
    template_id: str
    values: list[str]  # "city:oslo", "num:12.5", "unit:kilometer" -- for the split checks
    slots: dict[str, str]  # surface strings as the user typed them
    steps: list[list[tuple[str, dict]]] = field(default_factory=list)  # per step: (tool, arguments)
    results: list[list[str]] = field(default_factory=list)  # per step: JSON result per call
    towns: dict[str, dict] = field(default_factory=dict)  # made-up cities the tools know (training only)

    def run(self, calls: list[tuple[str, dict]], now: datetime) -> list[dict]:
        """Execute one step's calls; record and return their parsed results."""
        out = [tools.execute(name, args, now=now, towns=self.towns) for name, args in calls]
        self.steps.append(calls)
        self.results.append(out)
        return [json.loads(r) for r in out]


def _core(rng: random.Random, cores: list[ph.Core], split: str, op: str | None = None,
          composed: str | None = None) -> ph.Core:
    """A core of `split`; for training, a `composed` kind's core is composed P_COMPOSED_CORE of the time.
    (Held-out draws take nothing extra from `rng`, so the evaluation cases stay as they were.)"""
    if composed and split == cv.TRAIN and rng.random() < P_COMPOSED_CORE:
        return composed_core(rng, composed, op)
    return rng.choice([c for c in cores if c.split == split and (op is None or c.op == op)])


def _frame(rng, core, slots) -> tuple[ph.Request, dict[str, str]]:
    request = ph.frame(rng, core, slots)
    if request.template_id.endswith(".lower"):
        # The model copies what the user typed, so lower-cased requests lower-case the arguments too.
        slots = {k: v.lower() for k, v in slots.items()}
    return request, slots


def _city(rng: random.Random, split: str, towns: dict[str, dict]) -> str:
    """A city for a request: in training mostly a made-up one, which the tools then know (`towns`).

    Held-out requests draw from the table's held-out cities only, with the same draws as ever, so
    the evaluation cases do not change when the training mix does.
    """
    if split == cv.TRAIN and rng.random() < P_MADE_UP_CITY:
        name = cv.made_up_city(rng)
        towns[name.lower()] = cv.made_up_town(rng, name)
        return name
    return rng.choice(cv.cities(split))


def _two_cities(rng, split, towns) -> tuple[str, str]:
    if split != cv.TRAIN:
        c1, c2 = rng.sample(cv.cities(split), 2)
        return c1, c2
    while True:
        c1, c2 = _city(rng, split, towns), _city(rng, split, towns)
        if c1.lower() != c2.lower():
            return c1, c2


def build(rng: random.Random, split: str, kind: str, wordings: str | None = None) -> Plan:
    """A plan of `kind` whose request uses only templates and values of `split`.

    `wordings` (default: `split`) takes the templates (cores and frames) from another split: held-out
    values in training wordings is how probe_split.py tells unseen values from unseen wordings.
    """
    wordings = wordings or split
    now = cv.random_now(rng)
    towns: dict[str, dict] = {}
    if kind in ("weather", "time", "weather_unknown", "time_unknown"):
        base = kind.split("_")[0]
        # An unknown city is made up and not added to `towns`: the tool answers with an error.
        city = cv.made_up_city(rng) if kind.endswith("unknown") else _city(rng, split, towns)
        cores = ph.WEATHER if base == "weather" else ph.TIME
        request, s = _frame(rng, _core(rng, cores, wordings, composed=base), {"city": city})
        plan = Plan(kind, request.text, request.template_id, [f"city:{city.lower()}"], s, towns=towns)
        plan.run([("get_weather" if base == "weather" else "get_time", {"city": s["city"]})], now)
        return plan
    if kind == "calculate":
        op = rng.choice(tools.OPERATORS)
        a, b = cv.draw_number(rng, split), cv.draw_number(rng, split)
        request, s = _frame(rng, _core(rng, ph.CALC, wordings, op, composed="calculate"), {"a": a, "b": b})
        plan = Plan(kind, request.text, request.template_id, [f"num:{a}", f"num:{b}"], {**s, "op": op})
        plan.run([("calculate", {"a": cv.as_json_number(a), "op": op, "b": cv.as_json_number(b)})], now)
        return plan
    if kind == "convert":
        dims = cv.unit_words(split)
        units = rng.sample(dims[rng.choice(sorted(dims))], 2)
        words = [rng.choice(u.aliases) for u in units]
        values = [f"unit:{u.name}" for u in units]
        if split == cv.TRAIN and rng.random() < P_MADE_UP_UNIT:
            # A unit the converter rejects: the words of a call are copied from the request, never recalled.
            # Held-out conversions name two units the model never saw, so sometimes both are made up.
            both = rng.random() < P_BOTH_UNITS_MADE_UP
            for k in ((0, 1) if both else (rng.randrange(2),)):
                while True:
                    words[k] = cv.made_up_unit(rng)
                    if words[k] != words[1 - k]:
                        break
                values[k] = f"madeup:{words[k]}"
        v = cv.draw_number(rng, split, positive=units[0].dimension != "temperature")
        request, s = _frame(rng, _core(rng, ph.CONVERT, wordings, composed="convert"),
                            {"v": v, "from": words[0], "to": words[1]})
        plan = Plan(kind, request.text, request.template_id, [f"num:{v}"] + values, s)
        plan.run([("convert_units", {"value": cv.as_json_number(v), "from_unit": s["from"], "to_unit": s["to"]})],
                 now)
        return plan
    if kind in ("wdiff", "wtwo"):
        c1, c2 = _two_cities(rng, split, towns)
        cores = ph.WEATHER_DIFF if kind == "wdiff" else ph.WEATHER_TWO
        request, s = _frame(rng, _core(rng, cores, wordings, composed=kind), {"c1": c1, "c2": c2})
        plan = Plan(kind, request.text, request.template_id, [f"city:{c1.lower()}", f"city:{c2.lower()}"], s,
                    towns=towns)
        first = plan.run([("get_weather", {"city": s["c1"]}), ("get_weather", {"city": s["c2"]})], now)
        if kind == "wdiff":
            t1, t2 = first[0]["temperature_c"], first[1]["temperature_c"]
            plan.run([("calculate", {"a": t1, "op": "-", "b": t2})], now)
        return plan
    if kind == "tw":
        city = _city(rng, split, towns)
        request, s = _frame(rng, _core(rng, ph.TIME_WEATHER, wordings, composed="tw"), {"city": city})
        plan = Plan(kind, request.text, request.template_id, [f"city:{city.lower()}"], s, towns=towns)
        plan.run([("get_time", {"city": s["city"]}), ("get_weather", {"city": s["city"]})], now)
        return plan
    if kind == "wconv":
        city = _city(rng, split, towns)
        to = rng.choice([w for u in cv.unit_words(split)["temperature"] if u.name != "celsius" for w in u.aliases
                         if len(w) > 2])
        request, s = _frame(rng, _core(rng, ph.WEATHER_CONVERT, wordings), {"city": city, "to": to})
        plan = Plan(kind, request.text, request.template_id, [f"city:{city.lower()}", f"unit:{lookup(to).name}"], s,
                    towns=towns)
        first = plan.run([("get_weather", {"city": s["city"]})], now)
        plan.run([("convert_units", {"value": first[0]["temperature_c"], "from_unit": "celsius",
                                     "to_unit": s["to"]})], now)
        return plan
    if kind == "chain":
        core = _core(rng, ph.CALC_CHAIN, wordings, composed="chain")
        op1, op2 = core.op[0], core.op[1]
        while True:
            a, b, c = (cv.draw_number(rng, split, small=rng.random() < 0.5) for _ in range(3))
            request, s = _frame(rng, core, {"a": a, "b": b, "c": c})
            plan = Plan(kind, request.text, request.template_id, [f"num:{a}", f"num:{b}", f"num:{c}"],
                        {**s, "op1": op1, "op2": op2})
            r1 = plan.run([("calculate", {"a": cv.as_json_number(a), "op": op1, "b": cv.as_json_number(b)})], now)
            if "result" in r1[0] and (op2 != "/" or float(c) != 0):
                plan.run([("calculate", {"a": r1[0]["result"], "op": op2, "b": cv.as_json_number(c)})], now)
                return plan
    raise ValueError(f"unknown plan kind {kind!r}")
