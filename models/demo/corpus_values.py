"""Slot values for the demo corpus, split into training and held-out pools.

What it is for: every number, city and unit a synthetic request mentions comes
from here, already assigned to one split. Training requests draw only from
the training pools, held-out requests only from the held-out pools, so a
held-out request never repeats a value the model saw in a training request.

What it is not for: tool results. Results are computed by the real executors
in tools.py and may repeat across splits (a temperature of 14 is a result,
not a request value).

Why it is shaped so: membership is a pure function of the value (a CRC of
its text), not of generation order, so the split cannot drift when the corpus
generator changes, and a test can check any value's side directly.
"""

from __future__ import annotations

import random
import zlib
from datetime import datetime, timedelta, timezone

from models.demo import tools, units

TRAIN, HELD_OUT = "train", "held_out"


def _bucket(kind: str, text: str, modulus: int) -> int:
    return zlib.crc32(f"{kind}:{text}".encode()) % modulus


def number_split(text: str) -> str:
    """Held-out numbers: one in four, by CRC of the printed number."""
    return HELD_OUT if _bucket("num", text, 4) == 0 else TRAIN


def city_split(city: str) -> str:
    """Held-out cities: about one in three of the weather table."""
    return HELD_OUT if _bucket("city", city, 3) == 0 else TRAIN


def cities(split: str) -> list[str]:
    return sorted(row["city"] for row in tools.city_table().values() if city_split(row["city"]) == split)


def unit_words(split: str) -> dict[str, list[units.Unit]]:
    """Units of the split, grouped by dimension (temperature only in training)."""
    grouped: dict[str, list[units.Unit]] = {}
    for unit in units.UNITS:
        if unit.split == split:
            grouped.setdefault(unit.dimension, []).append(unit)
    # A dimension needs two units to make a conversion request.
    return {dim: us for dim, us in grouped.items() if len(us) >= 2}


def draw_number(rng: random.Random, split: str, *, positive: bool = False, small: bool = False) -> str:
    """A number as the user types it: canonical text, so JSON renders it identically."""
    while True:
        shape = rng.random()
        if small or shape < 0.35:
            text = str(rng.randint(1, 99))
        elif shape < 0.7:
            text = str(rng.randint(100, 9999))
        elif shape < 0.85:
            text = f"{rng.randint(0, 999)}.{rng.randint(1, 9)}"
        else:
            text = f"{rng.randint(0, 99)}.{rng.randint(1, 99):02d}".rstrip("0")
        if not positive and rng.random() < 0.06:
            text = "-" + text
        if number_split(text) == split and float(text) != 0:
            return text


def as_json_number(text: str) -> int | float:
    """The JSON value a number's text stands for (`12` -> 12, `12.5` -> 12.5)."""
    return int(text) if "." not in text else float(text)


SYLLABLES = ("ka", "lo", "mir", "ven", "tor", "sa", "dun", "bel", "qua", "rho", "zen", "ith",
              "mar", "os", "vel", "tra", "gor", "ny", "shi", "pel", "ard", "wyn", "cor", "ul")
_SUFFIXES = ("", "", "", " City", "port", "burg", "ville", " Bay", "stad", "ford")


def unknown_city(rng: random.Random) -> str:
    """A made-up place name that is not in the weather table (training only).

    These teach the model to copy a name it has never seen and to report a
    tool error; they are generated, so the held-out real cities stay unseen.
    """
    known = tools.city_table()
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        name = (name + rng.choice(_SUFFIXES)).title()
        if name.lower() not in known:
            return name


def random_now(rng: random.Random) -> datetime:
    """A UTC instant in 2025, minute resolution: the clock reading for a get_time result."""
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    return start + timedelta(minutes=rng.randrange(365 * 24 * 60))
