"""The reasoning-budget sampler machine (models/reasoning_budget.py)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from models.reasoning_budget import BudgetPlan, BudgetState, ReasoningBudgetMachine

OPEN, CLOSE, TOOL = 1000, 1001, 1002
A, NL = 65, 10
# "é" is b"\xc3\xa9"; these two tokens each carry half of it.
E_LEAD, E_TAIL = 300, 301
# "€" is b"\xe2\x82\xac", split over three tokens.
EURO_1, EURO_2, EURO_3 = 310, 311, 312
MSG_1, MSG_2 = 500, 501

VOCAB = {
    OPEN: b"<think>",
    CLOSE: b"</think>",
    TOOL: b"<tool_call>",
    E_LEAD: b"\xc3",
    E_TAIL: b"\xa9",
    EURO_1: b"\xe2",
    EURO_2: b"\x82",
    EURO_3: b"\xac",
    MSG_1: b" Out of",
    MSG_2: b" budget.",
}


def token_bytes(token: int) -> bytes:
    return VOCAB.get(token, bytes([token]) if token < 128 else b"")


def plan(budget: int, **overrides) -> BudgetPlan:
    fields = dict(
        start_seqs=((OPEN,),),
        end_seqs=((CLOSE,), (TOOL,)),
        forced=(CLOSE,),
        budget=budget,
        prefill=(),
    )
    fields.update(overrides)
    return BudgetPlan(**fields)


def generate(machine: ReasoningBudgetMachine, proposals: Iterable[int]) -> list[int]:
    """The model proposes one token per step; a forced token overrides it."""
    emitted = []
    for proposal in proposals:
        forced = machine.forced_token()
        token = proposal if forced is None else forced
        machine.accept(token)
        emitted.append(token)
    return emitted


@pytest.mark.parametrize("budget", [0, 1, 5])
def test_exactly_budget_free_tokens_follow_the_opener_then_the_closer_is_forced(budget):
    machine = ReasoningBudgetMachine(plan(budget), token_bytes)
    emitted = generate(machine, [OPEN] + [A] * 20)
    assert emitted == [OPEN] + [A] * budget + [CLOSE] + [A] * (20 - budget - 1)
    assert machine.state is BudgetState.DONE


def test_nothing_is_forced_before_the_block_opens():
    machine = ReasoningBudgetMachine(plan(0), token_bytes)
    assert generate(machine, [A] * 10) == [A] * 10
    assert machine.state is BudgetState.IDLE
    assert machine.forced_token() is None


def test_each_thought_token_spends_one():
    machine = ReasoningBudgetMachine(plan(5), token_bytes)
    generate(machine, [OPEN, A, A])
    assert machine.state is BudgetState.COUNTING
    assert machine.remaining == 3


def test_a_prompt_that_opened_the_block_starts_the_count_with_its_own_tokens():
    # The template rendered `<think>\n`: the newline after the opener is
    # one of the budget's tokens.
    machine = ReasoningBudgetMachine(plan(3, prefill=(OPEN, NL)), token_bytes)
    assert machine.state is BudgetState.COUNTING
    assert machine.remaining == 2
    assert generate(machine, [A] * 5) == [A, A, CLOSE, A, A]


def test_a_prefilled_block_with_budget_zero_forces_at_once():
    machine = ReasoningBudgetMachine(plan(0, prefill=(OPEN, NL)), token_bytes)
    assert machine.state is BudgetState.FORCING
    assert machine.forced_token() == CLOSE
    assert generate(machine, [A, A]) == [CLOSE, A]


def test_prompt_tokens_past_the_budget_do_not_consume_the_forced_closer():
    machine = ReasoningBudgetMachine(plan(1, prefill=(OPEN, NL, NL, NL)), token_bytes)
    assert machine.forced_token() == CLOSE
    assert generate(machine, [A, A]) == [CLOSE, A]


def test_a_closer_before_the_budget_runs_out_ends_the_thought_with_nothing_forced():
    machine = ReasoningBudgetMachine(plan(10), token_bytes)
    proposals = [OPEN, A, A, CLOSE] + [A] * 15
    assert generate(machine, proposals) == proposals
    assert machine.state is BudgetState.DONE


def test_the_closer_does_not_spend_budget():
    # Budget 3: two thought tokens then the model's own closer. Had the
    # closer spent one, the budget would hit zero on it and force a
    # second closer over the next token.
    machine = ReasoningBudgetMachine(plan(3), token_bytes)
    proposals = [OPEN, A, A, CLOSE, A, A]
    assert generate(machine, proposals) == proposals


def test_a_tool_call_opener_ends_the_thought():
    machine = ReasoningBudgetMachine(plan(3), token_bytes)
    proposals = [OPEN, A, TOOL] + [A] * 10
    assert generate(machine, proposals) == proposals
    assert machine.state is BudgetState.DONE


def test_without_a_tool_end_sequence_the_tool_opener_is_just_a_thought_token():
    machine = ReasoningBudgetMachine(plan(3, end_seqs=((CLOSE,),)), token_bytes)
    assert generate(machine, [OPEN, A, TOOL, A, A]) == [OPEN, A, TOOL, A, CLOSE]


def test_the_message_is_forced_before_the_closer():
    machine = ReasoningBudgetMachine(plan(2, forced=(MSG_1, MSG_2, CLOSE)), token_bytes)
    emitted = generate(machine, [OPEN] + [A] * 8)
    assert emitted == [OPEN, A, A, MSG_1, MSG_2, CLOSE, A, A, A]


EOT = 2


def test_an_end_of_turn_inside_a_thought_that_must_close_starts_message_and_closer():
    machine = ReasoningBudgetMachine(plan(50, forced=(MSG_1, MSG_2, CLOSE)), token_bytes, close_on=(EOT,))
    emitted = []
    for proposal in [OPEN, A, EOT, A, A, A]:
        forced = machine.forced_token()
        token = machine.substitute(proposal) if forced is None else forced
        machine.accept(token)
        emitted.append(token)
    assert emitted == [OPEN, A, MSG_1, MSG_2, CLOSE, A]
    assert machine.state is BudgetState.DONE


def test_an_end_of_turn_outside_a_thought_is_left_alone():
    machine = ReasoningBudgetMachine(plan(50, forced=(MSG_1, MSG_2, CLOSE)), token_bytes, close_on=(EOT,))
    assert machine.substitute(EOT) == EOT  # no thought open yet
    generate(machine, [OPEN, A, CLOSE])
    assert machine.substitute(EOT) == EOT


def test_without_close_on_an_end_of_turn_ends_the_thought_as_sampled():
    machine = ReasoningBudgetMachine(plan(50), token_bytes)
    generate(machine, [OPEN, A])
    assert machine.substitute(EOT) == EOT


def test_forcing_waits_for_a_split_utf8_character_to_complete():
    machine = ReasoningBudgetMachine(plan(2), token_bytes)
    generate(machine, [OPEN, A, E_LEAD])
    # The budget is spent, but the text ends on half of "é".
    assert machine.state is BudgetState.WAITING_UTF8
    assert machine.forced_token() is None
    generate(machine, [E_TAIL])
    assert machine.state is BudgetState.FORCING
    assert generate(machine, [A, A]) == [CLOSE, A]


def test_a_three_byte_character_is_waited_out_over_two_tokens():
    machine = ReasoningBudgetMachine(plan(1), token_bytes)
    emitted = generate(machine, [OPEN, EURO_1, EURO_2, EURO_3, A, A])
    assert emitted == [OPEN, EURO_1, EURO_2, EURO_3, CLOSE, A]


def test_a_character_completed_inside_the_budget_does_not_delay_forcing():
    machine = ReasoningBudgetMachine(plan(3), token_bytes)
    emitted = generate(machine, [OPEN, E_LEAD, E_TAIL, A, A, A])
    assert emitted == [OPEN, E_LEAD, E_TAIL, A, CLOSE, A]


def test_an_invalid_byte_after_a_lead_byte_does_not_wait_forever():
    # "é" never completes: an ASCII byte follows its lead. Waiting cannot
    # help, so the next token ends the wait.
    machine = ReasoningBudgetMachine(plan(1), token_bytes)
    emitted = generate(machine, [OPEN, E_LEAD, A, A, A])
    assert emitted == [OPEN, E_LEAD, A, CLOSE, A]


def test_the_model_may_close_the_thought_while_forcing_waits_on_a_character():
    machine = ReasoningBudgetMachine(plan(1), token_bytes)
    proposals = [OPEN, E_LEAD, CLOSE, A, A]
    assert generate(machine, proposals) == proposals
    assert machine.state is BudgetState.DONE


def test_a_multi_token_closer_is_forced_token_by_token():
    closer = (2001, 2002, 2003)
    machine = ReasoningBudgetMachine(plan(1, end_seqs=(closer,), forced=closer), token_bytes)
    generate(machine, [OPEN, A])
    forced = []
    for _ in closer:
        token = machine.forced_token()
        forced.append(token)
        machine.accept(token)
    assert tuple(forced) == closer
    assert machine.state is BudgetState.DONE
    assert machine.forced_token() is None


def test_a_multi_token_closer_ends_the_thought_only_when_complete():
    closer = (2001, 2002)
    machine = ReasoningBudgetMachine(plan(10, end_seqs=(closer,), forced=closer), token_bytes)
    generate(machine, [OPEN, 2001, A, 2002])
    assert machine.state is BudgetState.COUNTING, "a broken closer is just thought"
    generate(machine, [2001, 2001, 2002])
    assert machine.state is BudgetState.DONE, "an overlapping partial match is not lost"


def test_a_multi_token_opener_arms_only_when_complete():
    machine = ReasoningBudgetMachine(plan(1, start_seqs=((5, 5, 6),)), token_bytes)
    generate(machine, [5, A, 5, 6, 6])
    assert machine.state is BudgetState.IDLE
    assert generate(machine, [5, 5, 5, 6, A, A]) == [5, 5, 5, 6, A, CLOSE]


def test_a_new_opener_after_done_gets_a_fresh_budget():
    machine = ReasoningBudgetMachine(plan(1), token_bytes)
    emitted = generate(machine, [OPEN, A, A, A, OPEN, A, A, A])
    assert emitted == [OPEN, A, CLOSE, A, OPEN, A, CLOSE, A]
    assert machine.state is BudgetState.DONE


def test_emitting_something_other_than_the_forced_token_is_an_error():
    machine = ReasoningBudgetMachine(plan(0), token_bytes)
    machine.accept(OPEN)
    with pytest.raises(ValueError, match=f"forcing token {CLOSE}"):
        machine.accept(A)


def test_a_plan_is_a_hashable_value_built_from_lists_or_tuples():
    from_lists = BudgetPlan([[OPEN]], [[CLOSE]], [CLOSE], 4, [OPEN, NL])
    from_tuples = BudgetPlan(((OPEN,),), ((CLOSE,),), (CLOSE,), 4, (OPEN, NL))
    assert from_lists == from_tuples
    assert hash(from_lists) == hash(from_tuples)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"budget": -1}, "budget"),
        ({"forced": ()}, "closer"),
        ({"start_seqs": ()}, "start"),
        ({"start_seqs": ((),)}, "start"),
        ({"end_seqs": ((),)}, "end sequence"),
    ],
)
def test_a_plan_the_machine_could_not_run_is_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        plan(**{"budget": 3, **overrides})
