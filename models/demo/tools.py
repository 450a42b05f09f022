"""The demo model's four tools: their OpenAI schemas and real executors.

What it is for: the tools the built-in demo checkpoint was trained to call
(`calculate`, `get_weather`, `convert_units`, `get_time`), their exact JSON
schemas (also shipped as configs/demo_tools.json, the `tools` array a client
sends), and executors that really compute the results. The corpus generator
uses these executors for every tool result it trains on, the offline
evaluation and the README example use them to answer the model's calls.

What it is not for: a tool framework for the server. The server never runs
tools; an OpenAI client does. This is the client side of the demo.

Why it is shaped so: results are compact JSON objects because the model reads
them through 96-token attention windows; the value a final answer must quote
(`result`, `temperature_c`, `time`) sits near the end of the tool turn.
Weather comes from a fixed table in data/cities.json -- a demo, not a forecast.
"""

from __future__ import annotations

import json
import operator
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo

from models.demo import units

_DATA = Path(__file__).with_name("data") / "cities.json"

_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
OPERATORS = tuple(_APPLY)

TOOLS: list[dict] = [
    {"type": "function", "function": {
        "name": "calculate",
        "description": "Apply one arithmetic operation to two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"},
            "op": {"type": "string", "enum": list(OPERATORS)},
            "b": {"type": "number"},
        }, "required": ["a", "op", "b"]},
    }},
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current temperature (Celsius) and condition in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
        }, "required": ["city"]},
    }},
    {"type": "function", "function": {
        "name": "convert_units",
        "description": "Convert a value between units of length, mass, volume, speed, time or temperature.",
        "parameters": {"type": "object", "properties": {
            "value": {"type": "number"},
            "from_unit": {"type": "string"},
            "to_unit": {"type": "string"},
        }, "required": ["value", "from_unit", "to_unit"]},
    }},
    {"type": "function", "function": {
        "name": "get_time",
        "description": "Current local time in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
        }, "required": ["city"]},
    }},
]

TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)


def format_number(x: float) -> str:
    """Numbers as the tools print them: at most 4 decimals, no trailing zeros."""
    return json.dumps(clean_number(x))


def clean_number(x: float) -> int | float:
    """Round to 4 decimals; integral values become ints (so JSON shows `12`, not `12.0`)."""
    r = round(float(x), 4)
    if r == int(r):
        return int(r)
    return r


@lru_cache(maxsize=1)
def city_table() -> dict[str, dict]:
    """The fixed weather table, keyed by lower-case city name."""
    rows = json.loads(_DATA.read_text(encoding="utf-8"))
    return {row["city"].lower(): row for row in rows}


def _find_city(city: str, towns: dict[str, dict] | None = None) -> dict | None:
    key = " ".join(str(city).strip().lower().split())
    return city_table().get(key) or (towns or {}).get(key)


def calculate(a: float, op: str, b: float) -> dict:
    if op not in OPERATORS:
        return {"error": f"unknown operator {op!r}"}
    a, b = float(a), float(b)
    if op == "/" and b == 0:
        return {"error": "division by zero"}
    return {"result": clean_number(_APPLY[op](a, b))}


def get_weather(city: str, towns: dict[str, dict] | None = None) -> dict:
    row = _find_city(city, towns)
    if row is None:
        return {"error": f"no weather data for {city}"}
    return {"city": row["city"], "temperature_c": row["temperature_c"], "condition": row["condition"]}


def convert_units(value: float, from_unit: str, to_unit: str) -> dict:
    source, target = units.lookup(from_unit), units.lookup(to_unit)
    for word, unit in ((from_unit, source), (to_unit, target)):
        if unit is None:
            return {"error": f"unknown unit {word}"}
    try:
        result = units.convert(float(value), source, target)
    except ValueError as exc:
        return {"error": str(exc)}
    return {"result": clean_number(result), "unit": to_unit}


def get_time(city: str, now: datetime | None = None, towns: dict[str, dict] | None = None) -> dict:
    """Local time in `city` at `now` (default: the real current time, UTC-aware)."""
    row = _find_city(city, towns)
    if row is None:
        return {"error": f"no time zone known for {city}"}
    now = now or datetime.now(timezone.utc)
    local = now.astimezone(ZoneInfo(row["timezone"]))
    return {"city": row["city"], "time": local.strftime("%H:%M"), "day": local.strftime("%A")}


def execute(name: str, arguments: dict | str, *, now: datetime | None = None,
            towns: dict[str, dict] | None = None) -> str:
    """Run one tool call; return the tool message content (compact JSON).

    `towns` adds rows to the weather table, keyed by lower-case name: the training corpus's
    made-up cities (corpus_values.made_up_town). Served and evaluated calls see the table only.

    Bad calls (unknown tool, malformed or missing arguments) come back as an
    `{"error": ...}` result, as a real agent harness would report them.
    """
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        if name == "calculate":
            result = calculate(args["a"], args["op"], args["b"])
        elif name == "get_weather":
            result = get_weather(args["city"], towns)
        elif name == "convert_units":
            result = convert_units(args["value"], args["from_unit"], args["to_unit"])
        elif name == "get_time":
            result = get_time(args["city"], now=now, towns=towns)
        else:
            result = {"error": f"unknown tool {name}"}
    except (KeyError, TypeError, ValueError) as exc:
        result = {"error": f"bad arguments for {name}: {exc}"}
    return json.dumps(result, ensure_ascii=False)
