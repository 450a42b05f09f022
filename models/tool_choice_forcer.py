"""Force a tool call for `tool_choice: "required"` or a named function.

Without a grammar engine we cannot constrain the arguments, but we can make
the call happen and, for a named function, make it the right function: the
sampler is made to emit the format's call prefix (`<tool_call>\\n{"name":
"get_weather", "arguments": ` for Hermes) token by token, and the model writes
the arguments from there. When the prompt opened a thought, forcing waits
until the thought closes, so reasoning still happens first. A model that
tries to end its turn inside the thought (an end-of-turn token sampled while
waiting) gets the thought's closer instead, then the call: "required" means
a call, not a turn that ends in thinking. The closer is preceded by
`closing_message` (the server's `--reasoning-budget-message`), as when a
budget closes a thought: a thought the server cuts ends the same way
whichever rule cut it, so a client that passes the reasoning back gets it
re-rendered as the same tokens (with the message "\n", the Qwen3
template's own "\n</think>").

Same protocol as the reasoning-budget machine (`forced_token()` /
`accept(token)`), plus `substitute(token)`, which the sampler offers every
sampled (not forced) token before accepting it; so it is just another logit
processor in the sampler's list.
No torch.
"""

from __future__ import annotations

import enum


class _State(enum.Enum):
    WAITING = "waiting"
    FORCING = "forcing"
    DONE = "done"


class ToolChoiceForcer:
    def __init__(self, forced: tuple[int, ...], wait_for: tuple[int, ...] = (), end_ids: tuple[int, ...] = (),
                 closing_message: tuple[int, ...] = ()):
        if not forced:
            raise ValueError("nothing to force")
        self.forced = tuple(forced)
        self.wait_for = tuple(wait_for)
        self.closing_message = tuple(closing_message)  # forced before a closer the model did not start
        self.end_ids = frozenset(end_ids)  # tokens that would end the turn (EOS, stop ids)
        self._state = _State.WAITING if self.wait_for else _State.FORCING
        self._queue = self.forced  # what FORCING emits, token by token
        self._tail: list[int] = []
        self._i = 0

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def forced_token(self) -> int | None:
        if self._state is _State.FORCING:
            return self._queue[self._i]
        return None

    def _closer_left(self) -> tuple[int, ...]:
        """What of `wait_for` is still to come, given the tokens seen (a partly written closer is finished, not repeated)."""
        for k in range(min(len(self._tail), len(self.wait_for) - 1), 0, -1):
            if tuple(self._tail[-k:]) == self.wait_for[:k]:
                return self.wait_for[k:]
        return self.wait_for

    def substitute(self, token: int) -> int:
        """An end-of-turn token while waiting becomes the closer, and the call follows."""
        if self._state is _State.WAITING and token in self.end_ids:
            left = self._closer_left()
            # A half-written closer is finished at once; a message would split it.
            message = self.closing_message if left == self.wait_for else ()
            self._queue = message + left + self.forced
            self._state, self._i = _State.FORCING, 0
            return self._queue[0]
        return token

    def accept(self, token: int) -> None:
        if self._state is _State.WAITING:
            self._tail = (self._tail + [token])[-len(self.wait_for):]
            if tuple(self._tail) == self.wait_for:
                self._state = _State.FORCING
        elif self._state is _State.FORCING:
            if token != self._queue[self._i]:
                raise ValueError(f"expected forced token {self._queue[self._i]}, got {token}")
            self._i += 1
            if self._i == len(self._queue):
                self._state = _State.DONE
