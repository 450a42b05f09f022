"""The streaming side of tool-call parsing, shared by every format.

`ToolCallStreamer` is a small state machine over a text buffer: content
mode looks for the format's openers, a format's own modes read what sits
between opener and call, and the shared call mode feeds a
`CallObjectStream` (call_json.py), announcing the call (`ToolCallDelta`
with id and name) once `ready` and then passing on argument pieces.

Content mode holds back text that might be the start of an opener (`<tool`
at the end of a delta) and whitespace that might precede one, so marker
text never leaks into content and the stream can drop exactly the
whitespace the whole parse drops (rules in tool_calls.py).

Not for: a format's grammar (hermes.py, llama3.py, mistral.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from server.output.call_json import CallObjectStream
from server.output.tool_calls import (
    ContentDelta,
    ToolCallDelta,
    find_first,
    new_call_id,
    partial_suffix,
    skip_json_ws,
    skip_space,
)


class ToolCallStreamer:
    """Streaming reading of one format: content with embedded calls.

    Subclasses supply `openers`, `_enter_block(opener)` and their own
    `_mode_<name>` methods; a mode consumes from `self._buf` and returns
    True to run again, False to wait for more text (or, when `final`, to
    stop). Shared modes: content, dead (the rest is content), json_ws
    (skip whitespace that is kept in `_raw`), call (read one call object).
    """

    openers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._buf = ""  # received, not yet consumed
        self._raw = ""  # consumed text of a block not yet known to be a call
        self._events: list[ContentDelta | ToolCallDelta] = []
        self._mode = "content"
        self._skip_space = False  # just after a call: see `_mode_content`
        self._emitted = False  # any content sent yet
        self._call: CallObjectStream | None = None
        self._then = "content"  # mode after the current call completes
        self._then_ws: str | None = None  # mode after json_ws
        self._current: int | None = None  # index of the announced, unfinished call
        self.calls = 0

    @property
    def has_calls(self) -> bool:
        return self.calls > 0

    def feed(self, text: str) -> list[ContentDelta | ToolCallDelta]:
        self._buf += text
        self._run(final=False)
        return self._take()

    def finish(self) -> list[ContentDelta | ToolCallDelta]:
        self._run(final=True)
        if self._buf:  # a mode that stopped on a fragment: it is content
            self._content(self._buf)
            self._buf = ""
        return self._take()

    def _take(self) -> list[ContentDelta | ToolCallDelta]:
        events, self._events = self._events, []
        return events

    def _run(self, final: bool) -> None:
        while getattr(self, f"_mode_{self._mode}")(final):
            pass

    def _content(self, text: str) -> None:
        if text:
            self._emitted = True
            self._events.append(ContentDelta(text))

    # -- shared modes ----------------------------------------------------------

    def _mode_content(self, final: bool) -> bool:
        buf = self._buf
        if self._skip_space:
            past = skip_space(buf, 0)
            if past == len(buf):
                if final:
                    self._buf = ""
                return False  # whitespace after a call: wait for what follows
            if not self._emitted:
                buf = self._buf = buf[past:]
            self._skip_space = False
        hit = find_first(buf, self.openers)
        if hit is not None:
            at, opener = hit
            before = buf[:at]
            kept = before.rstrip()
            self._content(kept)
            self._raw = before[len(kept):] + opener
            self._buf = buf[at + len(opener):]
            self._enter_block(opener)
            return True
        if final:
            self._content(buf)
            self._buf = ""
            return False
        safe = len(buf) - partial_suffix(buf, self.openers)
        upto = len(buf[:safe].rstrip())  # whitespace waits: an opener may follow
        self._content(buf[:upto])
        self._buf = buf[upto:]
        return False

    def _mode_dead(self, final: bool) -> bool:
        self._content(self._buf)
        self._buf = ""
        return False

    def _mode_json_ws(self, final: bool) -> bool:
        at = skip_json_ws(self._buf, 0)
        self._raw += self._buf[:at]
        self._buf = self._buf[at:]
        if not self._buf:
            if final:
                self._fail()
            return False
        assert self._then_ws is not None
        self._mode = self._then_ws
        return True

    def _start_call(self, then: str, args_keys: tuple[str, ...] = ("arguments",), name: str | None = None) -> None:
        self._call = CallObjectStream(args_keys, name)
        self._then = then
        self._mode = "call"

    def _mode_call(self, final: bool) -> bool:
        call = self._call
        assert call is not None
        used = call.feed(self._buf)
        if self._current is None:
            self._raw += self._buf[:used]
        self._buf = self._buf[used:]
        if call.error is None and self._current is None and call.ready:
            self._current = self.calls
            self.calls += 1
            self._raw = ""
            self._events.append(ToolCallDelta(self._current, id=self._new_id(), name=call.name))
        if self._current is not None:
            args = call.take_args()  # up to the error, if there is one
            if args:
                self._events.append(ToolCallDelta(self._current, arguments=args))
        if call.error is not None:
            if self._current is None:
                self._fail()
            else:  # already announced: end it here, the rest is content
                self._end_announced(call)
            return True
        if call.done:
            self._current = None
            self._call = None
            self._mode = self._then
            return True
        if final and self._current is None and call.name is not None:
            # Cut after the call's name, before its arguments began: a call all the same, its arguments
            # as far as they got (none), rather than the format's markup as the answer's text.
            self._events.append(ToolCallDelta(self.calls, id=self._new_id(), name=call.name))
            self.calls += 1
            self._mode = "dead"
        elif final and self._current is None:
            self._fail()
        elif final:  # the text ends inside an announced call (max_tokens): its arguments end as far as it got
            self._end_announced(call)
        return False

    def _end_announced(self, call: CallObjectStream) -> None:
        """End the announced call where its text broke off or broke: what the scanner held of a token, key
        or escape is the model's text too, and ends the arguments; nothing more belongs to the call."""
        tail = call.pending_args()
        if tail:
            self._events.append(ToolCallDelta(self._current, arguments=tail))
        self._current, self._mode = None, "dead"

    def _fail(self) -> None:
        """The block is not a call: it and everything after it is content."""
        self._content(self._raw + self._buf)
        self._raw = self._buf = ""
        self._mode = "dead"

    def _after_ws(self, then: str) -> None:
        """Go to `then` after skipping JSON whitespace kept in `_raw`."""
        self._then_ws = then
        self._mode = "json_ws"

    def _enter_block(self, opener: str) -> None:
        raise NotImplementedError
