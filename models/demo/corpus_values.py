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
from functools import lru_cache

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
_ONSETS = ("b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "kr", "l", "m", "n", "p", "pr",
           "qu", "r", "s", "sh", "sk", "st", "t", "tr", "th", "v", "w", "y", "z", "")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "au", "ea", "ia", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "t", "k", "m", "nd", "rg", "sk", "x")
_PREFIXES = ("San ", "New ", "Port ", "Saint ", "El ", "Las ", "Fort ", "Lake ")
_NAME_SUFFIXES = (" City", " Bay", "burg", "ville", "stad", "ford", "grad", "abad", "pur", " Springs")


@lru_cache(maxsize=1)
def _letter_chain() -> dict[str, list[str]]:
    """Which letter follows each pair of letters in the training third of the table's names
    ("^" pads the start, "$" ends a name)."""
    chain: dict[str, list[str]] = {}
    for city in cities(TRAIN):
        for word in city.lower().split():
            padded = "^^" + word + "$"
            for i in range(2, len(padded)):
                chain.setdefault(padded[i - 2: i], []).append(padded[i])
    return chain


def _chained_word(rng: random.Random) -> str:
    """A word from the letter chain: spelled like a real place name, but (almost always) none."""
    chain, word = _letter_chain(), "^^"
    while len(word) < 14:
        nxt = rng.choice(chain[word[-2:]])
        if nxt == "$":
            break
        word += nxt
    return word[2:]


def _syllables(rng: random.Random, most: int) -> str:
    """One to `most` random onset-vowel-coda syllables, glued."""
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.randint(1, most)))


def _made_up_word(rng: random.Random) -> str:
    """A lower-case made-up word for a city name (training only).

    A small model learns to copy the pieces it was trained to copy, not pieces in general
    (measured: made-up names copied, held-out real names garbled, when all made-up names were
    onset-vowel-coda syllables). So words come from three sources: the letter statistics of the
    training cities' names (the pieces real names are cut into), plain random letters (every
    letter piece), and random onsets, vowels and codas. (Adding pieces of everyday words and more
    made-up units made the held-out figures worse in a 20-minute run: measured, not kept.)
    """
    while True:
        source = rng.random()
        if source < 0.45:
            word = _chained_word(rng)
        elif source < 0.7:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
        else:
            word = _syllables(rng, 3)
        if len(word) >= 3:
            return word


def made_up_city(rng: random.Random) -> str:
    """A made-up place name that is not in the weather table (training only).

    Most training requests about a city name one of these, not a table city: a name drawn from
    letters reaches the model as pieces it must copy, the way a held-out real city does, where a
    table city soon becomes a few tokens the model recalls. The tokenizer is trained without any
    names (tokenizer_build.without_names).
    """
    known = tools.city_table()
    while True:
        name = _made_up_word(rng)
        shape = rng.random()
        if shape < 0.1:
            name = rng.choice(_PREFIXES) + name.title()
        elif shape < 0.2:
            name = (name + rng.choice(_NAME_SUFFIXES)).title()
        elif shape < 0.5:  # two made-up words, as "Addis Ababa" or "Cape Town" come to the model
            name = f"{name.title()} {_made_up_word(rng).title()}"
        else:
            name = name.title()
        if name.lower() not in known:
            return name


def made_up_town(rng: random.Random, name: str) -> dict:
    """A weather-table row for a made-up city: what the training corpus's tools report for it."""
    rows = list(tools.city_table().values())
    return {"city": name, "timezone": rng.choice(rows)["timezone"], "temperature_c": rng.randint(-20, 40),
            "condition": rng.choice(rows)["condition"]}


# Short everyday words and word endings: the pieces the tokenizer cuts unseen unit words into.
_EVERYDAY_PIECES = ("in", "me", "per", "day", "on", "at", "to", "for", "one", "all", "we", "is", "it", "an",
                    "or", "as", "er", "es", "ed", "ing", "th", "ch", "sh", "st", "ks", "ll", "res", "not")


def made_up_unit(rng: random.Random) -> str:
    """A made-up unit word (training only): the converter rejects it, the model must still copy it.

    Some are glued from everyday pieces, and some are two words around "per": the checkpoint
    misread held-out units that the tokenizer cuts into pieces it knows as words ("in|ch|es in yd"
    read as a link word, "me|ters per second" completed as a training unit's "per hour").
    """
    while True:
        shape = rng.random()
        if shape < 0.35:
            word = "".join(rng.choice(_EVERYDAY_PIECES) for _ in range(rng.randint(2, 3)))
        elif shape < 0.5:
            word = f"{_syllables(rng, 2)} per {_syllables(rng, 2)}"
        else:
            word = _syllables(rng, 2)
        if len(word) >= 2 and units.lookup(word) is None and units.lookup(word + "s") is None:
            return word + ("s" if rng.random() < 0.5 and not word.endswith("s") else "")


def random_now(rng: random.Random) -> datetime:
    """A UTC instant in 2025, minute resolution: the clock reading for a get_time result."""
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    return start + timedelta(minutes=rng.randrange(365 * 24 * 60))
