"""`reasoning_budget_tokens` from the wire to a sampler plan (seed 001's port).

Everything between a request body and `models/reasoning_budget.py`'s
machine, in the order a request meets it:

1. the wire value and its range (`parse_budget`): llama.cpp's -1
   (unrestricted) and every non-negative int32, nothing else;
2. precedence (`effective_budget`): a request that is absent or says -1
   gets the server's `--reasoning-budget`; any other value wins, higher or
   lower;
3. whether the checkpoint can honour it (`unsupported_reason`): no
   reasoning format means no thought to bound, so the budget is vacuous
   (llama.cpp builds no sampler either); a channel grammar (gpt-oss
   harmony) has no closer a mask can force, so it is refused BY NAME --
   a 501 at the route -- rather than served unbounded;
4. the plan (`resolve_plan`), built at the one seam that holds both the
   tokenizer and the rendered prompt: opener and closer as token
   sequences, the tool-call opener as a second end of thought, the forced
   message + closer, and the prompt's own opener as prefill when the
   template already opened the block.

The same `unsupported_reason` is asked at the route and again here, so a
path that skipped the route gets an error, not an unbounded thought.

Not for: the pydantic field itself (server/protocol validates with
`parse_budget`'s range) or the per-step machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from models.family_table import ReasoningFormat
from models.reasoning_budget import BudgetPlan

UNRESTRICTED = -1
MAX_BUDGET = 2_147_483_647  # INT32_MAX, llama.cpp's schema limit


class InvalidReasoningBudget(ValueError):
    """A budget outside [-1, 2147483647]: a 400 naming the field."""


class UnsupportedReasoningBudget(Exception):
    """A budget the checkpoint's reasoning format cannot honour: a 501."""


def parse_budget(value: int, field: str = "reasoning_budget_tokens") -> int:
    """The wire value, checked against llama.cpp's range; returned unchanged.

    `field` names what the caller sent (`thinking_budget_tokens` on chat,
    `--reasoning-budget` at startup) so the error points at it.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidReasoningBudget(f"{field} must be an integer, but got {value!r}")
    if not UNRESTRICTED <= value <= MAX_BUDGET:
        raise InvalidReasoningBudget(
            f"{field} must be between {UNRESTRICTED} <= value <= {MAX_BUDGET}, but got {value}"
        )
    return value


def effective_budget(request_value: int | None, server_default: int) -> int:
    """llama.cpp's precedence: absent or -1 falls back to the server flag."""
    if request_value is None or request_value == UNRESTRICTED:
        return server_default
    return request_value


def unsupported_reason(fmt: ReasoningFormat | None) -> str | None:
    """Why a budget cannot be honoured for `fmt`, or None when it can.

    None for no format too: there the budget is vacuous, not refused.
    """
    if fmt is None or fmt.kind == "markers":
        return None
    return (
        f"`reasoning_budget_tokens` is not implemented for the {fmt.name} reasoning format: "
        f"its chain of thought is a channel grammar, not a marker pair whose closer the "
        f"sampler can force. Bound the whole completion with `max_tokens`, or send -1."
    )


def prompt_opens_reasoning(prompt_text: str, start: str, end: str) -> bool:
    """Did the rendered prompt itself open a thought the model must continue?

    True when the last opener is followed by nothing but whitespace --
    llama.cpp's "thinking forced open" (`...assistant\\n<think>\\n`). An
    opener followed by a closer was a finished thought; one followed by
    other text is an opener quoted somewhere in the conversation (a user
    asking about `<think>` tags), not a block the generation continues.
    """
    at = prompt_text.rfind(start)
    if at < 0:
        return False
    after = prompt_text[at + len(start) :]
    return end not in after and not after.strip()


def resolve_plan(
    budget: int,
    fmt: ReasoningFormat | None,
    prompt_text: str,
    encode: Callable[[str], Sequence[int]],
    message: str | None = None,
    tool_opener: str | None = None,
    opened: bool = False,
) -> BudgetPlan | None:
    """The machine's plan for an effective `budget`, or None for no machine.

    `encode` is the served tokenizer with special-token parsing ON, so
    `<think>` is the control token and not five pieces of punctuation
    (llama.cpp tokenizes its tags the same way). `tool_opener` is the
    family's tool-call opener (`FamilyInfo.tool_call_opener`): a call can
    open before the thought closes, and ends it when it does. `message`
    is `--reasoning-budget-message`, forced before the closer. `opened`: the
    route found the prompt's last opener open though text follows it (a
    client's prefilled thought, `continue_final_message`); its tokens count.

    -1 -> None (unrestricted). No format -> None (vacuous). A channel
    grammar -> `UnsupportedReasoningBudget`, with the route's message.
    """
    parse_budget(budget)
    if budget == UNRESTRICTED or fmt is None:
        return None
    why = unsupported_reason(fmt)
    if why is not None:
        raise UnsupportedReasoningBudget(why)
    start, end = fmt.start, fmt.end
    if not start or not end:
        raise UnsupportedReasoningBudget(
            f"the {fmt.name} reasoning format is declared as a marker pair but has no markers"
        )
    closer = tuple(encode(end))
    end_seqs = [closer]
    if tool_opener:
        tool = tuple(encode(tool_opener))
        if tool and tool not in end_seqs:
            end_seqs.append(tool)
    forced = (tuple(encode(message)) if message else ()) + closer
    prefill: tuple[int, ...] = ()
    if opened or prompt_opens_reasoning(prompt_text, start, end):
        prefill = tuple(encode(prompt_text[prompt_text.rfind(start) :]))
    return BudgetPlan(
        start_seqs=(tuple(encode(start)),),
        end_seqs=tuple(end_seqs),
        forced=forced,
        budget=budget,
        prefill=prefill,
    )
