"""Composed request cores and random frames: many phrasings, none of them a held-out one."""

from __future__ import annotations

import random
import string

import pytest

from models.demo import corpus_composed, corpus_phrasing
from models.demo.corpus_composed import composed_core

SLOTS = {"weather": {"city"}, "time": {"city"}, "calculate": {"a", "b"}, "convert": {"v", "from", "to"},
         "wdiff": {"c1", "c2"}, "wtwo": {"c1", "c2"}, "tw": {"city"}, "chain": {"a", "b", "c"}}
KINDS = [("weather", None), ("time", None), ("calculate", "+"), ("calculate", "-"), ("calculate", "*"),
         ("calculate", "/"), ("convert", None), ("wdiff", None), ("wtwo", None), ("tw", None), ("chain", "+*"),
         ("chain", "*-"), ("chain", "-/")]


def _slots(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


@pytest.mark.parametrize("kind,op", KINDS)
def test_a_composed_core_carries_exactly_its_kinds_slots_and_is_a_training_core(kind, op):
    rng = random.Random(5)
    for _ in range(500):
        core = composed_core(rng, kind, op)
        assert _slots(core.text) == SLOTS[kind], core.text
        assert core.split == corpus_phrasing.TRAIN and core.op == op
        assert core.text.format(city="Oslo", c1="Rome", c2="Lima", a="1", b="2", c="3", v="4",
                                **{"from": "km", "to": "mi"})


def test_composed_cores_are_many_and_never_the_text_of_a_hand_written_core():
    rng = random.Random(6)
    ph = corpus_phrasing
    held_out = {corpus_composed._normal(c.text) for c in (*ph.WEATHER, *ph.TIME, *ph.CALC, *ph.CONVERT,
                                                          *ph.WEATHER_DIFF, *ph.WEATHER_TWO, *ph.TIME_WEATHER,
                                                          *ph.CALC_CHAIN) if c.split == ph.HELD_OUT}
    for kind, op in KINDS:
        texts = [composed_core(rng, kind, op).text for _ in range(2000)]
        assert not {corpus_composed._normal(t) for t in texts} & held_out
        # Far more phrasings than a list the model could learn by heart (hand-written: 2-40 per kind).
        assert len(set(texts)) > 100, (kind, op)


def test_the_same_seed_composes_the_same_cores():
    def draw(seed):
        rng = random.Random(seed)
        return [composed_core(rng, kind, op).id for kind, op in KINDS * 20]
    assert draw(1) == draw(1) != draw(2)


def test_a_random_frame_is_never_a_held_out_frame_though_it_may_use_their_words():
    ph = corpus_phrasing
    held_out_frames = {ph.normal_frame(f) for f in ph.PREFIXES[ph.HELD_OUT] + ph.SUFFIXES[ph.HELD_OUT] if f}
    rng = random.Random(7)
    frames = [ph.noise_frame(rng) for _ in range(3000)]
    assert all(prefix or suffix for prefix, suffix in frames)
    assert len(set(frames)) > 2500
    assert not {ph.normal_frame(part) for frame in frames for part in frame} & held_out_frames
    framed = {w for prefix, suffix in frames for w in ph.normal_frame(prefix + " " + suffix).split()}
    assert {"excuse", "sorry", "bother", "okay", "more", "thing", "next", "many", "much"} <= framed
    # Some words are made up, as a held-out value is to the model: neither a noise word nor empty.
    assert len(framed - {w.lower() for w in ph.NOISE_WORDS}) > 50


def test_no_training_frame_is_a_held_out_frame():
    ph = corpus_phrasing
    held_out = {ph.normal_frame(f) for f in ph.PREFIXES[ph.HELD_OUT] + ph.SUFFIXES[ph.HELD_OUT] if f}
    assert not {ph.normal_frame(f) for f in ph.PREFIXES[ph.TRAIN] + ph.SUFFIXES[ph.TRAIN]} & held_out
