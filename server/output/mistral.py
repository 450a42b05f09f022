"""The mistral tool-call format, both generations.

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}

The list form (tokenizers up to v7: Mistral 7B v0.3, Nemo, Small 3.x) carries
a JSON list of call objects; extra keys such as Mistral's own 9-character
`id` are ignored (we issue `call_...` ids like every format). The v11 form
(Magistral, Devstral, Small 3.2+) names the function in plain text, then
`[ARGS]` and the arguments object, one `[TOOL_CALLS]` per call. A function
name is `[A-Za-z0-9_.-]+` immediately followed by `[ARGS]`.

An empty list (`[TOOL_CALLS][]`) is not a call: it stays content, like any
block that yields none. Shared rules are in tool_calls.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from server.output.call_json import decode_call_object
from server.output.json_stream import DECODER, canonical_json
from server.output.tool_calls import (
    FUNCTION_NAME_CHARS,
    BlockResult,
    ParsedToolCall,
    ToolCallParser,
    new_call_id,
    scan_blocks,
    skip_json_ws,
)
from server.output.tool_stream import ToolCallStreamer

OPEN = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(f"[{FUNCTION_NAME_CHARS}]*")


def _read_list(text: str, pos: int) -> BlockResult:
    calls: list[ParsedToolCall] = []
    pos = skip_json_ws(text, pos)
    while True:
        found = decode_call_object(text, pos, ("arguments",))
        if found is None:
            return calls, pos, False
        end, name, arguments = found
        calls.append(ParsedToolCall(name, arguments))
        pos = skip_json_ws(text, end)
        if text.startswith(",", pos):
            pos = skip_json_ws(text, pos + 1)
            continue
        if text.startswith("]", pos):
            pos += 1
        return calls, pos, True


def _read_named(text: str, pos: int) -> BlockResult:
    name = _NAME.match(text, pos).group()  # type: ignore[union-attr]  # `*` always matches
    after = pos + len(name)
    if not name or not text.startswith(ARGS, after):
        return [], pos, False
    start = skip_json_ws(text, after + len(ARGS))
    try:
        value, end = DECODER.raw_decode(text, start)
    except ValueError:
        return [], pos, False
    if not isinstance(value, dict):
        return [], pos, False
    return [ParsedToolCall(name, canonical_json(value))], end, True


def _read_block(text: str, pos: int) -> BlockResult:
    pos = skip_json_ws(text, pos)
    if text.startswith("[", pos):
        return _read_list(text, pos + 1)
    return _read_named(text, pos)


class MistralParser(ToolCallParser):
    name: ClassVar[str] = "mistral"
    openers: ClassVar[tuple[str, ...]] = (OPEN,)
    markers: ClassVar[tuple[str, ...]] = (OPEN, ARGS)

    def parse(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        return scan_blocks(text, self.openers, _read_block)

    def streamer(self, new_id: Callable[[], str] = new_call_id) -> ToolCallStreamer:
        return MistralStreamer(new_id)


class MistralStreamer(ToolCallStreamer):
    openers = (OPEN,)
    _name = ""  # the v11 form's function name, read so far

    def _enter_block(self, opener: str) -> None:
        self._after_ws("head")

    def _mode_head(self, final: bool) -> bool:
        if self._buf[0] == "[":
            self._raw += "["
            self._buf = self._buf[1:]
            self._after_ws("first")
        else:
            self._name = ""
            self._mode = "name"
        return True

    def _mode_first(self, final: bool) -> bool:
        self._start_call(then="after_element")
        return True

    def _mode_after_element(self, final: bool) -> bool:
        self._buf = self._buf[skip_json_ws(self._buf, 0):]
        if not self._buf:
            return False
        if self._buf[0] == ",":
            self._buf = self._buf[1:]
            self._mode = "next"
            return True
        if self._buf[0] == "]":
            self._buf = self._buf[1:]
        self._mode, self._skip_space = "content", True
        return True

    def _mode_next(self, final: bool) -> bool:
        self._buf = self._buf[skip_json_ws(self._buf, 0):]
        if not self._buf:
            return False
        self._raw = ""  # a broken later element is content from its own start
        self._start_call(then="after_element")
        return True

    def _mode_name(self, final: bool) -> bool:
        run = _NAME.match(self._buf).group()  # type: ignore[union-attr]
        self._name += run
        self._raw += run
        self._buf = self._buf[len(run):]
        if not self._buf:
            if final:
                self._fail()
            return False
        if self._buf.startswith(ARGS) and self._name:
            self._raw += ARGS
            self._buf = self._buf[len(ARGS):]
            self._after_ws("arguments")
            return True
        if ARGS.startswith(self._buf) and self._name and not final:
            return False
        self._fail()
        return True

    def _mode_arguments(self, final: bool) -> bool:
        self._start_call(then="content_after", name=self._name)
        return True

    def _mode_content_after(self, final: bool) -> bool:
        self._mode, self._skip_space = "content", True
        return True
