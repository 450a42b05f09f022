"""Force a tool call for `tool_choice: "required"` or a named function.

Without a grammar engine we cannot constrain the arguments, but we can make
the call happen and, for a named function, make it the right function: the
sampler is made to emit the format's call prefix (`<tool_call>\\n{"name":
"get_weather", "arguments": ` for Hermes) token by token, and the model writes
the arguments from there. When the prompt opened a thought, forcing waits
until the thought closes, so reasoning still happens first.

Same protocol as the reasoning-budget machine (`forced_token()` /
`accept(token)`), so it is just another logit processor in the sampler's list.
No torch.
"""

from __future__ import annotations

import enum


class _State(enum.Enum):
    WAITING = "waiting"
    FORCING = "forcing"
    DONE = "done"


class ToolChoiceForcer:
    def __init__(self, forced: tuple[int, ...], wait_for: tuple[int, ...] = ()):
        if not forced:
            raise ValueError("nothing to force")
        self.forced = tuple(forced)
        self.wait_for = tuple(wait_for)
        self._state = _State.WAITING if self.wait_for else _State.FORCING
        self._tail: list[int] = []
        self._i = 0

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def forced_token(self) -> int | None:
        if self._state is _State.FORCING:
            return self.forced[self._i]
        return None

    def accept(self, token: int) -> None:
        if self._state is _State.WAITING:
            self._tail = (self._tail + [token])[-len(self.wait_for):]
            if tuple(self._tail) == self.wait_for:
                self._state = _State.FORCING
        elif self._state is _State.FORCING:
            if token != self.forced[self._i]:
                raise ValueError(f"expected forced token {self.forced[self._i]}, got {token}")
            self._i += 1
            if self._i == len(self.forced):
                self._state = _State.DONE
