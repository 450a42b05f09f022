"""The cases models/demo/probe_split.py evaluates besides the held-out ones: values from the held-out pools in
training wordings (corpus.seen_wording_cases), and cases drawn as training draws them (training_like_cases)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from models.demo import corpus, corpus_values, units
from models.demo import corpus_phrasing as ph
from models.demo.corpus_phrasing import HELD_OUT, TRAIN

ROOT = Path(__file__).resolve().parents[1]


def _listed_core_ids(split: str) -> set[str]:
    return {c.id for v in vars(ph).values() if isinstance(v, list) for c in v
            if isinstance(c, ph.Core) and c.split == split}


def test_training_wording_cases_keep_the_held_out_counts_and_values_and_draw_their_wordings_from_training():
    held_out = [c for c in corpus.held_out_cases() if c.steps]
    seen = corpus.seen_wording_cases()
    trained, held = _listed_core_ids(TRAIN), _listed_core_ids(HELD_OUT)
    held_units = {u.name for u in units.UNITS if u.split == HELD_OUT}
    assert Counter(c.kind for c in seen) == Counter(c.kind for c in held_out)
    assert any(".c." in c.template_id for c in seen) and any(c.template_id.split("|")[0] in trained for c in seen)
    for case in seen:
        core, frame = case.template_id.split("|")
        assert frame.startswith(f"{TRAIN}."), case.template_id
        assert core not in held and (core in trained or ".c." in core), case.template_id  # listed or composed
        assert case.steps and case.answer_must_contain
        for value in case.values:
            kind, text = value.split(":", 1)
            if kind == "num":
                assert corpus_values.number_split(text) == HELD_OUT, value
            elif kind == "city":
                assert text in {c.lower() for c in corpus_values.cities(HELD_OUT)}, value
            else:
                assert kind == "unit" and value[5:] in held_units, value  # never a training or made-up unit


def test_the_held_out_cases_are_still_the_ones_the_shipped_checkpoints_figures_were_measured_on():
    # build() takes its wordings from a split of their own now; for held-out cases it must draw as it drew.
    measured = json.loads((ROOT / "models/demo/checkpoint/evaluation.json").read_text())["records"]
    cases = corpus.held_out_cases()
    assert {c.case_id: c.messages[0]["content"] for c in cases} == {k: r["request"] for k, r in measured.items()}


def test_training_like_cases_draw_wordings_and_values_as_training_does_and_never_expect_a_tool_error():
    held_out = [c for c in corpus.held_out_cases() if c.steps]
    cases = corpus.training_like_cases()
    assert Counter(c.kind for c in cases) == Counter(c.kind for c in held_out)
    assert all(c.template_id.split("|")[1].startswith(f"{TRAIN}.") for c in cases)
    made_up = [c for c in cases if any(v.startswith("city:") and v[5:] not in {x.lower() for x in
                                                                              corpus_values.cities(TRAIN)}
                                       for v in c.values)]
    assert len(made_up) > len(cases) // 4  # training's cities are mostly made up, and so are these
    assert all(corpus_values.number_split(v[4:]) == TRAIN for c in cases for v in c.values if v.startswith("num:"))
    for case in cases:
        for step in case.steps:
            assert not any('"error"' in r for r in step.results), case.case_id
