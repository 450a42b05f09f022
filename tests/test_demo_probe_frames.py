"""Held-out cases without their frames (models/demo/probe_frames.py): the same requests, minus greeting and courtesy."""

from __future__ import annotations

from models.demo import corpus_phrasing as ph
from models.demo.corpus import held_out_cases
from models.demo.corpus_values import HELD_OUT
from models.demo.probe_frames import unframed


def test_an_unframed_case_keeps_its_core_sentence_calls_and_results_and_loses_every_frame_word():
    frames = [f.strip() for f in ph.PREFIXES[HELD_OUT] + ph.SUFFIXES[HELD_OUT] if f.strip()]
    cases = [c for c in held_out_cases() if c.steps]
    for case in cases:
        bare = unframed(case)
        text, before = bare.messages[0]["content"], case.messages[0]["content"]
        assert text and len(text) < len(before)  # held-out requests always carry a greeting or a courtesy
        assert text.lower() in before.lower()
        assert not any(f.lower() in text.lower() for f in frames), text
        assert (bare.steps, bare.answer_must_contain, bare.values) == (case.steps, case.answer_must_contain, case.values)
        for step in case.steps:
            for call in step.calls:
                for value in call.arguments.values():
                    if isinstance(value, str) and value not in "+-*/":
                        assert value.lower() in text.lower()  # every copied argument is still there


def test_unframing_restores_the_capital_a_greeting_took_and_leaves_lower_case_requests_lower():
    cases = [c for c in held_out_cases() if c.steps]
    plain = [c for c in cases if c.template_id.endswith(".plain") and not c.template_id.split(".p")[1].startswith("0")]
    assert any(unframed(c).messages[0]["content"][0].isupper() for c in plain)
    lower = [c for c in cases if c.template_id.endswith(".lower")]
    assert lower and all(unframed(c).messages[0]["content"] == unframed(c).messages[0]["content"].lower() for c in lower)


def test_chat_cases_have_no_frame_and_come_back_unchanged():
    chat = [c for c in held_out_cases() if not c.steps]
    assert chat and all(unframed(c) is c for c in chat)
