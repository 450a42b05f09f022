"""The budget machine and the tool-call forcer together never force two different tokens.

Both can force; the sampler emits the first forced token and every processor
must accept it. Driven here over every token sequence of up to 3 model
choices (plus random longer ones) drawn from the tokens that matter -- text,
a split UTF-8 character, the opener, one- and two-token closers, the
tool-call opener, end of turn, a stop token -- for budgets 0-3 with and
without a closing message, with and without a budget.
"""

from __future__ import annotations

import itertools
import random

import pytest

from models.reasoning_budget import BudgetPlan
from models.sampling_processors import sampling_processors

OPEN, TOOL, NL, STOP, EOT, A, LEAD, CONT, CLOSE_1, CLOSE_2, MSG_1, MSG_2 = 1, 3, 7, 8, 9, 10, 20, 21, 30, 31, 40, 41
CALL = (5, TOOL, NL)
VOCAB = (A, LEAD, CONT, EOT, STOP, TOOL, OPEN, CLOSE_1, CLOSE_2, NL)


def _bytes(token: int) -> bytes:
    return {LEAD: b"\xc3", CONT: b"\xa9"}.get(token, b"x")


def _run(closer, message, budget, choices, with_budget):
    """Emit tokens as the sampler does; returns (emitted, forcer)."""
    plan = BudgetPlan(start_seqs=((OPEN,),), end_seqs=(closer, (TOOL,)), forced=message + closer, budget=budget,
                      prefill=(OPEN, NL))
    procs = sampling_processors(plan if with_budget else None, (CALL, closer, message), (STOP, EOT), _bytes)
    emitted, choices = [], iter(choices)
    while len(emitted) < 40:
        forced = next((t for t in (p.forced_token() for p in procs) if t is not None), None)
        if forced is None:
            token = next(choices, None)
            if token is None:
                break
            for p in procs:
                token = p.substitute(token)
        else:
            token = forced
        for p in procs:
            p.accept(token)  # raises if a processor was forcing something else
        emitted.append(token)
        if token in (STOP, EOT):
            break
    return emitted, procs[-1]


def _sequences():
    rng = random.Random(0)
    for n in range(1, 4):
        yield from itertools.product(VOCAB, repeat=n)
    for _ in range(2000):
        yield tuple(rng.choice(VOCAB) for _ in range(rng.randint(4, 6)))


@pytest.mark.slow
@pytest.mark.parametrize("with_budget", [True, False])
@pytest.mark.parametrize("closer", [(CLOSE_1,), (CLOSE_1, CLOSE_2)])
@pytest.mark.parametrize("message", [(), (MSG_1, MSG_2)])
def test_no_token_sequence_makes_the_two_force_different_tokens_or_end_the_turn_before_the_call(
        with_budget, closer, message):
    for budget in range(4):
        for choices in _sequences():
            emitted, forcer = _run(closer, message, budget, choices, with_budget)
            if emitted and emitted[-1] in (STOP, EOT):
                assert forcer.done, (budget, choices, emitted)


def test_an_end_of_turn_in_the_thought_closes_it_with_the_message_with_or_without_a_budget():
    for with_budget in (True, False):
        emitted, _ = _run((CLOSE_1,), (MSG_1, MSG_2), 3, [A, EOT], with_budget)
        assert emitted == [A, MSG_1, MSG_2, CLOSE_1, *CALL]
        # A call opened inside the thought ended the budget's count; the forcer closes it the same way.
        emitted, _ = _run((CLOSE_1,), (MSG_1, MSG_2), 3, [A, TOOL, EOT], with_budget)
        assert emitted == [A, TOOL, MSG_1, MSG_2, CLOSE_1, *CALL]
