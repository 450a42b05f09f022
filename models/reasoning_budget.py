"""The reasoning-budget sampler machine: llama.cpp's `common/reasoning-budget.cpp`.

A request may cap how many tokens a model thinks. The cap is enforced
where it cannot be argued with -- in the sampler: once the thought has
spent its budget, every logit but the next forced token is masked, and
the forced tokens are an optional message followed by the closing tag.
The machine watches every emitted token (forced or sampled) and says, per
step, whether a token is forced:

    IDLE ─opener─► COUNTING ─budget spent─► FORCING ─last forced token─► DONE
                     ├─ budget spent mid UTF-8 char ─► WAITING_UTF8 ─char complete─► FORCING
                     └─ closer or tool-call opener ─► DONE
    DONE ─opener─► COUNTING   (each new block gets a fresh budget)

- IDLE passes through and watches for a start sequence.
- COUNTING: every token spends one. A completed end sequence (the closer,
  or a tool-call opener -- a call can open before the thought closes)
  goes to DONE without spending. At zero: FORCING, or WAITING_UTF8 first
  when the text so far ends inside a UTF-8 character, so the forced tag
  never splits one.
- FORCING emits `plan.forced` one token per step, then DONE.
- DONE passes through and re-arms on a new opener.

Net effect: exactly `budget` free tokens after the opener (counting any
the prompt already put there), then message + closer.

Sequences are matched token by token against the tail of what was
emitted, so multi-token openers and closers work, overlapping prefixes
included. Prefill: when the rendered prompt already opened the block
(`...assistant\\n<think>\\n`), the plan carries those prompt tokens and the
machine is built having seen them, so it starts in COUNTING -- and with
budget 0, forcing at once.

Not for: deciding the plan (`models/reasoning_plan.py` owns the wire
value, precedence and tokenization) or touching tensors (the sampler
turns `forced_token()` into a logit mask). No torch.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class BudgetState(enum.Enum):
    IDLE = "idle"
    COUNTING = "counting"
    WAITING_UTF8 = "waiting_utf8"
    FORCING = "forcing"
    DONE = "done"


def _token_tuples(seqs: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(t) for t in seq) for seq in seqs)


@dataclass(frozen=True)
class BudgetPlan:
    """Everything the machine needs, already tokenized. A plain value: two
    resolutions of the same request against the same checkpoint are equal."""

    start_seqs: tuple[tuple[int, ...], ...]
    end_seqs: tuple[tuple[int, ...], ...]
    # message + closer, forced one token per step once the budget is spent.
    forced: tuple[int, ...]
    budget: int
    # The prompt's tokens from the opener on, when the prompt opened the block.
    prefill: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # Lists in, tuples stored: the plan rides on frozen SamplingParams.
        object.__setattr__(self, "start_seqs", _token_tuples(self.start_seqs))
        object.__setattr__(self, "end_seqs", _token_tuples(self.end_seqs))
        object.__setattr__(self, "forced", tuple(int(t) for t in self.forced))
        object.__setattr__(self, "prefill", tuple(int(t) for t in self.prefill))
        if self.budget < 0:
            raise ValueError(f"a plan's budget is a token count >= 0, got {self.budget}")
        if not self.start_seqs or any(not seq for seq in self.start_seqs):
            raise ValueError("a plan needs at least one non-empty start sequence")
        if any(not seq for seq in self.end_seqs):
            raise ValueError("an end sequence cannot be empty")
        if not self.forced:
            # Nothing to force would make FORCING a state with no way out.
            raise ValueError("a plan must force at least the closer")


class _TailMatcher:
    """Does the token stream now end with one of `seqs`?

    Compares the last few tokens against every sequence, so an overlapping
    partial match (`a a b` for `a b`) is not lost the way a single
    restart-on-mismatch cursor can lose it.
    """

    def __init__(self, seqs: tuple[tuple[int, ...], ...]) -> None:
        self._seqs = seqs
        self._tail: deque[int] = deque(maxlen=max((len(s) for s in seqs), default=1))

    def advance(self, token: int) -> bool:
        if not self._seqs:
            return False
        self._tail.append(token)
        tail = tuple(self._tail)
        for seq in self._seqs:
            if len(tail) >= len(seq) and tail[-len(seq) :] == seq:
                self._tail.clear()
                return True
        return False

    def reset(self) -> None:
        self._tail.clear()


def _unfinished_char(data: bytes) -> bytes:
    """The trailing bytes of a UTF-8 character `data` ends inside, else b""."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte or ASCII, not a continuation
            need = 4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2 if byte >= 0xC0 else 1
            return data[-back:] if back < need else b""
    # Only continuation bytes: invalid, and waiting would not make it valid.
    return b""


class ReasoningBudgetMachine:
    """One request's budget. Ask `forced_token()` before sampling, then
    `accept()` the token that was emitted, forced or not.

    `close_on`: tokens that must not end the turn inside a thought (the
    end-of-turn tokens, when tool_choice demands a call after the thought).
    Sampled while the thought is open, `substitute()` turns one into the
    start of message + closer, so the thought ends exactly as a spent budget
    ends it (tool_choice_forcer.py then makes the call).
    """

    def __init__(self, plan: BudgetPlan, token_bytes: Callable[[int], bytes],
                 close_on: Iterable[int] = ()) -> None:
        self._plan = plan
        self._close_on = frozenset(close_on)
        self._token_bytes = token_bytes
        self._start = _TailMatcher(plan.start_seqs)
        self._end = _TailMatcher(plan.end_seqs)
        self._state = BudgetState.IDLE
        self._remaining = plan.budget
        self._force_pos = 0
        # Bytes of a character the thought has started but not finished.
        self._pending_utf8 = b""
        for token in plan.prefill:
            self._step(token, from_prompt=True)

    @property
    def state(self) -> BudgetState:
        return self._state

    @property
    def remaining(self) -> int:
        """Free tokens left in the current block (meaningful while COUNTING)."""
        return self._remaining

    @property
    def plan(self) -> BudgetPlan:
        return self._plan

    def forced_token(self) -> int | None:
        """The token the sampler must emit at this step, or None to sample freely."""
        if self._state is BudgetState.FORCING:
            return self._plan.forced[self._force_pos]
        return None

    def substitute(self, token: int) -> int:
        """An end-of-turn token inside an open thought becomes the first forced token (see `close_on`)."""
        if token in self._close_on and self._state in (BudgetState.COUNTING, BudgetState.WAITING_UTF8):
            self._begin_forcing()
            return self._plan.forced[0]
        return token

    def accept(self, token_id: int) -> None:
        """Feed one emitted token. While FORCING it must be the forced one:
        anything else means the sampler ignored the mask, and the machine
        refuses to silently lose its place."""
        self._step(token_id, from_prompt=False)

    def _step(self, token: int, from_prompt: bool) -> None:
        state = self._state
        if state is BudgetState.IDLE or state is BudgetState.DONE:
            if self._start.advance(token):
                self._open()
        elif state is BudgetState.COUNTING or state is BudgetState.WAITING_UTF8:
            if self._end.advance(token):
                self._finish()
                return
            self._pending_utf8 = _unfinished_char(self._pending_utf8 + self._token_bytes(token))
            char_complete = not self._pending_utf8
            if state is BudgetState.WAITING_UTF8:
                if char_complete:
                    self._begin_forcing()
                return
            self._remaining -= 1
            if self._remaining <= 0:
                if char_complete:
                    self._begin_forcing()
                else:
                    self._state = BudgetState.WAITING_UTF8
        else:  # FORCING
            if from_prompt:
                # The prompt already overspent the budget; its tokens are
                # there, and the closer still has to be forced after them.
                return
            expected = self._plan.forced[self._force_pos]
            if token != expected:
                raise ValueError(
                    f"reasoning budget is forcing token {expected} but {token} was emitted"
                )
            self._force_pos += 1
            if self._force_pos >= len(self._plan.forced):
                self._finish()

    def _open(self) -> None:
        self._state = BudgetState.COUNTING
        self._remaining = self._plan.budget
        self._pending_utf8 = b""
        self._end.reset()
        if self._remaining <= 0:
            self._begin_forcing()

    def _begin_forcing(self) -> None:
        self._state = BudgetState.FORCING
        self._force_pos = 0
        self._end.reset()

    def _finish(self) -> None:
        self._state = BudgetState.DONE
        self._start.reset()
