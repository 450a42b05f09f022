"""Unit table for the demo `convert_units` tool.

What it is for: turning the unit words a user types ("km", "miles", "yd",
"degrees fahrenheit") into one canonical unit, and converting between two
units of the same dimension.

What it is not for: a general units library. It knows the few dozen everyday
units the demo model is trained and evaluated on, nothing more.

Why it is shaped so: the demo model copies unit words from the request into
the tool call verbatim (it cannot know a canonical spelling of a word it never
saw), so the executor, not the model, owns the alias table. Every unit has a
`split`: held-out units never appear in a training request, which keeps the
offline evaluation honest (see corpus_values.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    name: str  # canonical name, e.g. "kilometer"
    dimension: str  # "length", "mass", ...; conversion only within one dimension
    factor: float  # size in the dimension's base unit (unused for temperature)
    aliases: tuple[str, ...]  # surface forms a user may type; first is the plural
    split: str  # "train" or "held_out"


def _u(name, dimension, factor, aliases, split="train"):
    return Unit(name, dimension, factor, tuple(aliases), split)


UNITS: tuple[Unit, ...] = (
    # length, base metre
    _u("kilometer", "length", 1000.0, ["kilometers", "km", "kilometres", "kilometer"]),
    _u("mile", "length", 1609.344, ["miles", "mi", "mile"]),
    _u("meter", "length", 1.0, ["meters", "m", "metres", "meter"]),
    _u("foot", "length", 0.3048, ["feet", "ft", "foot"]),
    _u("centimeter", "length", 0.01, ["centimeters", "cm", "centimetres"]),
    _u("nautical mile", "length", 1852.0, ["nautical miles", "nmi"]),
    _u("yard", "length", 0.9144, ["yards", "yd", "yard"], "held_out"),
    _u("inch", "length", 0.0254, ["inches", "inch"], "held_out"),
    _u("millimeter", "length", 0.001, ["millimeters", "mm", "millimetres"], "held_out"),
    # mass, base kilogram
    _u("kilogram", "mass", 1.0, ["kilograms", "kg", "kilos"]),
    _u("gram", "mass", 0.001, ["grams", "g"]),
    _u("pound", "mass", 0.45359237, ["pounds", "lb", "lbs"]),
    _u("tonne", "mass", 1000.0, ["tonnes", "metric tons"]),
    _u("ounce", "mass", 0.028349523125, ["ounces", "oz"], "held_out"),
    _u("stone", "mass", 6.35029318, ["stone", "st"], "held_out"),
    # volume, base litre
    _u("liter", "volume", 1.0, ["liters", "L", "litres"]),
    _u("milliliter", "volume", 0.001, ["milliliters", "ml"]),
    _u("gallon", "volume", 3.785411784, ["gallons", "gal"]),
    _u("quart", "volume", 0.946352946, ["quarts", "qt"]),
    _u("cup", "volume", 0.2365882365, ["cups", "cup"], "held_out"),
    _u("pint", "volume", 0.473176473, ["pints", "pt"], "held_out"),
    # speed, base metre per second
    _u("kilometer per hour", "speed", 1 / 3.6, ["km/h", "kph", "kilometers per hour"]),
    _u("mile per hour", "speed", 0.44704, ["mph", "miles per hour"]),
    _u("knot", "speed", 1852 / 3600, ["knots", "kn"], "held_out"),
    _u("meter per second", "speed", 1.0, ["m/s", "meters per second"], "held_out"),
    # time, base second
    _u("second", "time", 1.0, ["seconds", "s", "sec"]),
    _u("minute", "time", 60.0, ["minutes", "min"]),
    _u("hour", "time", 3600.0, ["hours", "h", "hr"]),
    _u("day", "time", 86400.0, ["days", "day"], "held_out"),
    _u("week", "time", 604800.0, ["weeks", "week"], "held_out"),
    # temperature: affine, handled in convert()
    _u("celsius", "temperature", 1.0, ["celsius", "C", "degrees celsius", "°C"]),
    _u("fahrenheit", "temperature", 1.0, ["fahrenheit", "F", "degrees fahrenheit", "°F"]),
    _u("kelvin", "temperature", 1.0, ["kelvin", "K"]),
)

_BY_ALIAS: dict[str, Unit] = {}
for _unit in UNITS:
    for _alias in (_unit.name, *_unit.aliases):
        # Invariant: an alias names exactly one unit (case-insensitively).
        assert _BY_ALIAS.setdefault(_alias.lower(), _unit) is _unit, _alias
    _BY_ALIAS.setdefault(_unit.name.lower() + "s", _unit)


def lookup(word: str) -> Unit | None:
    """The unit a user's word names, or None. Case and surrounding space are ignored."""
    key = " ".join(str(word).strip().lower().split())
    if key.startswith("degrees ") and key not in _BY_ALIAS:
        key = key[len("degrees "):]
    return _BY_ALIAS.get(key)


def _to_kelvin(value: float, unit: Unit) -> float:
    if unit.name == "celsius":
        return value + 273.15
    if unit.name == "fahrenheit":
        return (value - 32) * 5 / 9 + 273.15
    return value


def _from_kelvin(value: float, unit: Unit) -> float:
    if unit.name == "celsius":
        return value - 273.15
    if unit.name == "fahrenheit":
        return (value - 273.15) * 9 / 5 + 32
    return value


def convert(value: float, source: Unit, target: Unit) -> float:
    """`value` in `source` expressed in `target`. Raises ValueError across dimensions."""
    if source.dimension != target.dimension:
        raise ValueError(f"cannot convert {source.dimension} to {target.dimension}")
    if source.dimension == "temperature":
        return _from_kelvin(_to_kelvin(value, source), target)
    return value * source.factor / target.factor
