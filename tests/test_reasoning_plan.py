"""`reasoning_budget_tokens` from the wire to a plan (models/reasoning_plan.py): seed 001's tests."""

from __future__ import annotations

import pytest

from models.family_table import ReasoningFormat, load_family_table
from models.reasoning_budget import BudgetState, ReasoningBudgetMachine
from models.reasoning_plan import (
    MAX_BUDGET,
    InvalidReasoningBudget,
    UnsupportedReasoningBudget,
    effective_budget,
    parse_budget,
    prompt_opens_reasoning,
    resolve_plan,
    unsupported_reason,
)

THINK = ReasoningFormat("think", "<think>", "</think>", "markers")
HARMONY = ReasoningFormat("harmony", None, None, "channel")
DSML = "<｜DSML｜function_calls>"
SPECIALS = {"<think>": 1000, "</think>": 1001, DSML: 1002}


def encode(text: str) -> list[int]:
    """A toy tokenizer with special-token parsing on: each marker is one
    control token wherever it appears, everything else one token per byte."""
    ids: list[int] = []
    i = 0
    while i < len(text):
        for marker, token in SPECIALS.items():
            if text.startswith(marker, i):
                ids.append(token)
                i += len(marker)
                break
        else:
            ids.extend(text[i].encode())
            i += 1
    return ids


def token_bytes(token: int) -> bytes:
    for marker, special in SPECIALS.items():
        if special == token:
            return marker.encode()
    return bytes([token])


def test_the_wire_value_admits_exactly_llama_cpps_range():
    for good in (-1, 0, 2000, MAX_BUDGET):
        assert parse_budget(good) == good
    assert MAX_BUDGET == 2_147_483_647
    for bad in (-2, MAX_BUDGET + 1, -(2**63)):
        with pytest.raises(InvalidReasoningBudget) as err:
            parse_budget(bad)
        assert "reasoning_budget_tokens" in str(err.value)
        assert f"must be between -1 <= value <= 2147483647, but got {bad}" in str(err.value)


def test_a_range_error_names_the_field_the_caller_sent():
    with pytest.raises(InvalidReasoningBudget, match="^thinking_budget_tokens must be between"):
        parse_budget(-5, field="thinking_budget_tokens")


def test_a_non_integer_budget_is_refused():
    for bad in (True, "40", 4.0):
        with pytest.raises(InvalidReasoningBudget, match="integer"):
            parse_budget(bad)  # type: ignore[arg-type]


def test_a_request_saying_nothing_or_minus_one_takes_the_server_flag():
    assert effective_budget(None, 512) == 512
    assert effective_budget(-1, 512) == 512
    assert effective_budget(None, -1) == -1


def test_any_other_request_value_wins_higher_or_lower():
    assert effective_budget(100, 512) == 100
    assert effective_budget(4096, 512) == 4096
    assert effective_budget(0, 512) == 0
    assert effective_budget(7, -1) == 7


def test_a_marker_family_resolves_to_its_tokenized_opener_and_closer():
    plan = resolve_plan(40, THINK, "<|User|>hi<|Assistant|><think>\n", encode)
    assert plan.start_seqs == ((1000,),)
    assert plan.end_seqs == ((1001,),)
    assert plan.forced == (1001,)
    assert plan.budget == 40
    assert plan.prefill == (1000, ord("\n")), "opener + newline"

    closed = resolve_plan(40, THINK, "<|Assistant|>", encode)
    assert closed.prefill == (), "the prompt did not open the block"


def test_a_prompt_that_closed_its_thought_has_no_prefill():
    plan = resolve_plan(40, THINK, "<|Assistant|><think>\n\n</think>\n\n", encode)
    assert plan.prefill == ()


def test_an_opener_quoted_earlier_in_the_conversation_does_not_open_the_block():
    prompt = "<|User|>what is a <think> tag?<|Assistant|>"
    assert not prompt_opens_reasoning(prompt, "<think>", "</think>")
    assert resolve_plan(40, THINK, prompt, encode).prefill == ()


def test_only_the_last_opener_of_the_prompt_counts():
    prompt = "<think>a</think>b<|User|>again<|Assistant|><think>\n"
    assert resolve_plan(4, THINK, prompt, encode).prefill == (1000, ord("\n"))


def test_a_tool_marker_is_a_second_end_sequence():
    plan = resolve_plan(5, THINK, "<think>", encode, tool_opener=DSML)
    assert plan.end_seqs == ((1001,), (1002,))
    assert plan.forced == (1001,), "only the closer is forced"


def test_the_budget_message_is_forced_before_the_closer():
    plan = resolve_plan(5, THINK, "", encode, message="Hm.")
    assert plan.forced == (ord("H"), ord("m"), ord("."), 1001)
    assert resolve_plan(5, THINK, "", encode, message="").forced == (1001,)


def test_minus_one_builds_no_machine_whatever_the_format():
    assert resolve_plan(-1, THINK, "<think>", encode) is None
    assert resolve_plan(-1, HARMONY, "x", encode) is None


def test_no_format_is_vacuous_and_a_channel_grammar_is_refused():
    assert resolve_plan(5, None, "hello", encode) is None
    assert unsupported_reason(None) is None
    assert unsupported_reason(THINK) is None

    why = unsupported_reason(HARMONY)
    assert why is not None and "harmony" in why
    with pytest.raises(UnsupportedReasoningBudget) as err:
        resolve_plan(5, HARMONY, "x", encode)
    assert str(err.value) == why, "the seam refuses what the route refuses"


def test_the_shipped_table_refuses_gpt_oss_and_serves_the_marker_families():
    table = load_family_table()
    assert unsupported_reason(table.family("gpt_oss").reasoning) is not None
    for model_type in ("qwen3", "glm4_moe", "deepseek_v32", "gemma4"):
        assert unsupported_reason(table.family(model_type).reasoning) is None, model_type


def test_an_out_of_range_budget_never_reaches_a_plan():
    with pytest.raises(InvalidReasoningBudget):
        resolve_plan(-2, THINK, "", encode)


def test_the_plan_carries_the_requested_number_and_resolving_twice_is_equal():
    once = resolve_plan(7, THINK, "<think>", encode)
    twice = resolve_plan(7, THINK, "<think>", encode)
    assert once.budget == 7
    assert once == twice
    assert resolve_plan(8, THINK, "<think>", encode) != once


def test_a_resolved_plan_gives_exactly_the_budget_after_the_opener_end_to_end():
    # The prompt opened the block with `<think>\n`; budget 3 leaves two
    # sampled tokens after that newline, then the closer.
    plan = resolve_plan(3, THINK, "<|Assistant|><think>\n", encode, tool_opener=DSML)
    machine = ReasoningBudgetMachine(plan, token_bytes)
    emitted = []
    for proposal in [ord("a")] * 5:
        forced = machine.forced_token()
        token = proposal if forced is None else forced
        machine.accept(token)
        emitted.append(token)
    assert emitted == [ord("a"), ord("a"), 1001, ord("a"), ord("a")]
    assert machine.state is BudgetState.DONE
