"""The logit processors one request's sampler runs: the reasoning budget, the tool-call forcer, grammars.

What it is for: building, in the one order that works, the processors a
request's parameters ask for. Two of them force token sequences: the
budget machine (message + closer once the budget is spent) and the
tool-choice forcer (the call's prefix once the thought closes). The sampler
takes the first forced token it is offered, and a processor handed a token
other than the one it forces raises -- so the two must never force at once.
The grammars (tool call, response format) mask; each may also force one
token, the end of turn, once its turn is complete: the response grammar
after its JSON answer or its calls, the call grammar after the one call
`parallel_tool_calls: false` allows. Neither clashes with the other two:
both come after any thought closed, so after the budget is done, and after
the forcer's prefix (the call it forced is the one that just completed). A
grammar handed a token it refuses stands down instead of raising.

Why it is shaped so: the budget machine goes first, and while it counts it
is the one that closes a thought the model tries to end inside (its
`close_on` turns the end-of-turn token into its own message + closer); the
forcer then only waits for the closer. The forcer closes the thought itself
(the same message + closer) only when no budget counts: there is none, or a
`<tool_call>` inside the thought already ended the count.
tests/test_sampling_processors.py drives the pair over every short token
sequence to hold the invariant. No torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from models.min_tokens import MinTokens
from models.reasoning_budget import BudgetPlan, ReasoningBudgetMachine
from models.tool_choice_forcer import ToolChoiceForcer


def sampling_processors(budget: BudgetPlan | None,
                        forced_call: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None,
                        end_ids: tuple[int, ...], token_bytes: Callable[[int], bytes],
                        grammars: Sequence = (), min_tokens: int = 0) -> list:
    """Processors for one sequence; `forced_call` is (call prefix, closer to wait for, closing message).

    `grammars` (models/tool_call_grammar.py, models/response_format_grammar.py) mask; they go last,
    so a token the others force is taken as forced and the grammar only follows it (the forcer's
    prefix ends where the arguments begin, and the call grammar accepts it). The response grammar
    forces one token, the end of turn once its JSON is complete, when no one else forces anything.
    `min_tokens` bans the end ids until that many tokens are out; a token another processor forces
    is taken all the same (a grammar whose answer is complete ends the turn).
    """
    procs: list = []
    if budget is not None:
        waits = forced_call is not None and bool(forced_call[1])
        procs.append(ReasoningBudgetMachine(budget, token_bytes, close_on=end_ids if waits else ()))
    if forced_call is not None:
        forced, wait_for, message = forced_call
        procs.append(ToolChoiceForcer(forced, wait_for, end_ids=end_ids, closing_message=message))
    procs.extend(grammars)
    if min_tokens > 0:
        procs.append(MinTokens(end_ids, min_tokens))
    return procs
