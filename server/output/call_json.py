"""One tool call written as JSON, read whole or as it streams.

Hermes blocks, Llama 3 calls and Mistral list elements are all a JSON
object `{"name": "...", "<args key>": {...}}`; Mistral v11 writes only the
arguments object after `[ARGS]`. This module reads such a value:

- `decode_call_object(text, pos, args_keys)`: the whole-text reading, with
  the stdlib decoder (call_json.DECODER accepts the same language as the
  scanner);
- `CallObjectStream`: the streaming reading, on `JsonScanner`, which learns
  the name as soon as it is complete and yields canonical argument text as
  it arrives.

The rules both follow: the value is an object; `name` is a non-empty
string; the arguments key (the first of `args_keys` present) is REQUIRED and
its value an object -- a bare `{"name": "Bob"}` is far more often a JSON
answer than a call; other keys are ignored. Arguments come out as
`canonical_json` text.

A stream may only announce a call once it cannot turn out to be something
else cheaply: `ready` is true once the name is known and the arguments
object has opened. Errors after that point are the caller's problem to
report (it has already sent the name); errors before it are not a call.

Not for: finding where a call starts or what separates calls (the format
parsers do that).
"""

from __future__ import annotations

import json
from typing import Any

from server.output.json_stream import DECODER, JsonScanner, canonical_json, canonical_piece


def decode_call_object(text: str, pos: int, args_keys: tuple[str, ...]) -> tuple[int, str, str] | None:
    """(end position, name, canonical arguments) of the call at `pos`, or None."""
    try:
        value, end = DECODER.raw_decode(text, pos)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None
    key = next((k for k in value if k in args_keys), None)
    if key is None or not isinstance(value[key], dict):
        return None
    return end, name, canonical_json(value[key])


def arguments_complete(arguments: str) -> bool:
    """A call's streamed argument text is all there: it parses as the object the arguments are (a call cut
    by a stop or the token limit left it open)."""
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


class CallObjectStream:
    """Streams one call object (or, given `name`, one bare arguments object)."""

    def __init__(self, args_keys: tuple[str, ...] = ("arguments",), name: str | None = None) -> None:
        self.scanner = JsonScanner()
        self.args_keys = args_keys
        self.name = name
        self.error: str | None = None
        self._args_only = name is not None
        self._depth = 0
        self._key: str | None = None  # the depth-1 key whose value is being read
        self._name_parts: list[str] | None = None
        # absent -> expected (its key was read) -> open -> closed
        self._args_state = "expected" if self._args_only else "absent"
        self._args_depth = 0
        self._args: list[str] = []

    @property
    def done(self) -> bool:
        return self.scanner.done and self.error is None

    @property
    def ready(self) -> bool:
        """The name is known and the arguments object has begun."""
        return self.name is not None and self._args_state in ("open", "closed")

    def feed(self, text: str) -> int:
        """Consume up to the end of the value; returns characters consumed."""
        if self.error is not None or self.scanner.done:
            return 0
        used = self.scanner.feed(text)
        for kind, payload in self.scanner.take_events():
            self._on(kind, payload)
            if self.error is not None:
                return used
        if self.scanner.error is not None:
            self.error = self.scanner.error
        elif self.scanner.done and not self._args_only and self.error is None:
            if self.name is None:
                self.error = "a tool call needs a non-empty string `name`"
            elif self._args_state != "closed":
                self.error = f"a tool call needs an object under {self.args_keys[0]!r}"
        return used

    def pending_args(self) -> str:
        """Argument text read but not yet produced (a key or number cut off mid-way), for a call the text
        ends inside: with what take_args gave, it is the prefix of the arguments the model wrote."""
        return self.scanner.pending() if self._args_state == "open" else ""

    def take_args(self) -> str:
        """Canonical argument text produced since the last call."""
        text = "".join(self._args)
        self._args.clear()
        return text

    def _on(self, kind: str, payload: Any) -> None:
        if self._args_state == "open":
            self._arg_event(kind, payload)
            return
        if self._args_only:
            if kind == "open" and payload == "{":
                self._args_state = "open"
                self._arg_event(kind, payload)
            else:
                self.error = "tool call arguments must be a JSON object"
            return
        if self._depth == 0:
            if kind != "open" or payload != "{":
                self.error = "a tool call must be a JSON object"
                return
            self._depth = 1
            return
        if self._depth == 1:
            self._member_event(kind, payload)
            return
        # Inside the value of an ignored key: only track depth.
        if kind == "open":
            self._depth += 1
        elif kind == "close":
            self._depth -= 1

    def _member_event(self, kind: str, payload: Any) -> None:
        if kind == "key":
            self._key = payload
            if payload in self.args_keys and self._args_state == "absent":
                self._args_state = "expected"
            return
        if kind in ("comma", "close"):
            if kind == "close":
                self._depth = 0
            return
        key = self._key
        if self._args_state == "expected" and key in self.args_keys:
            if kind != "open" or payload != "{":
                self.error = f"tool call {key!r} must be a JSON object"
                return
            self._args_state = "open"
            self._arg_event(kind, payload)
            return
        if key == "name" and self.name is None:
            self._name_event(kind, payload)
            return
        if kind == "open":
            self._depth += 1

    def _name_event(self, kind: str, payload: Any) -> None:
        if kind == "str_open":
            self._name_parts = []
        elif kind == "str" and self._name_parts is not None:
            self._name_parts.append(payload)
        elif kind == "str_close" and self._name_parts is not None:
            name = "".join(self._name_parts)
            if not name:
                self.error = "a tool call's name must not be empty"
            self.name = name or None
            self._name_parts = None
        else:
            self.error = "a tool call's name must be a string"

    def _arg_event(self, kind: str, payload: Any) -> None:
        self._args.append(canonical_piece(kind, payload))
        if kind == "open":
            self._args_depth += 1
        elif kind == "close":
            self._args_depth -= 1
            if self._args_depth == 0:
                self._args_state = "closed"
