"""tool_choice "required" / named: the forcer makes the call happen (models.tool_choice_forcer)."""

from __future__ import annotations

import pytest
import torch

from models.sampler import new_state, sample
from models.tool_choice_forcer import ToolChoiceForcer
from scheduler.sampling_params import SamplingParams

CLOSE, EOS, CALL = (90, 91), 2, (50, 51, 52)


def _drive(forcer, wanted):
    """Feed `wanted` model choices through the forcer as the sampler would; returns the emitted tokens."""
    out = []
    choices = iter(wanted)
    while not forcer.done:
        token = forcer.forced_token()
        if token is None:
            token = forcer.substitute(next(choices))
        forcer.accept(token)
        out.append(token)
    return out


def test_the_call_is_forced_once_the_thought_closes():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,))
    assert _drive(f, [7, 8, *CLOSE]) == [7, 8, *CLOSE, *CALL]


def test_without_a_thought_the_call_is_forced_at_once():
    assert _drive(ToolChoiceForcer(CALL, end_ids=(EOS,)), []) == list(CALL)


def test_an_end_of_turn_inside_the_thought_becomes_the_closer_then_the_call():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,))
    assert _drive(f, [7, 8, EOS]) == [7, 8, *CLOSE, *CALL]


def test_an_end_of_turn_inside_the_thought_closes_it_with_the_budget_message_first():
    # As a budget-closed thought ends: "\n" + "</think>" is what the Qwen3 template re-renders.
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,), closing_message=(60,))
    assert _drive(f, [7, 8, EOS]) == [7, 8, 60, *CLOSE, *CALL]


def test_a_thought_the_model_closes_itself_gets_no_message():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,), closing_message=(60,))
    assert _drive(f, [7, *CLOSE]) == [7, *CLOSE, *CALL]


def test_a_half_written_closer_is_finished_without_the_message_splitting_it():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,), closing_message=(60,))
    assert _drive(f, [7, CLOSE[0], EOS]) == [7, *CLOSE, *CALL]


def test_a_half_written_closer_is_finished_not_repeated():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,))
    assert _drive(f, [7, CLOSE[0], EOS]) == [7, *CLOSE, *CALL]


def test_tokens_that_do_not_end_the_turn_pass_through():
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,))
    assert f.substitute(7) == 7 and f.forced_token() is None


def test_emitting_something_other_than_the_forced_token_is_an_error():
    f = ToolChoiceForcer(CALL)
    with pytest.raises(ValueError, match="expected forced token"):
        f.accept(99)


def test_the_sampler_offers_the_greedy_choice_for_substitution():
    logits = torch.full((1, 100), -10.0)
    logits[0, EOS] = 10.0  # the model wants to end its turn
    f = ToolChoiceForcer(CALL, CLOSE, end_ids=(EOS,))
    state = new_state(SamplingParams(temperature=0.0), 0, [f])
    emitted = [sample(logits, [state], [([1], [])])[0].token for _ in range(len(CLOSE) + len(CALL))]
    assert emitted == [*CLOSE, *CALL]
