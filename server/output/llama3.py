"""The llama3_json tool-call format (Llama 3.1 / 3.2 / 3.3 JSON tool calling).

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}
    {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "t", "parameters": {}}

Either `<|python_tag|>` followed by a call, or -- only when the message
(after leading whitespace) starts with `{` -- a bare call. Further calls
follow after `;`. The arguments key is `parameters` (Meta's prompt format)
or `arguments`, whichever comes first in the object. The arguments key is
required: `{"name": "Bob", "age": 3}` as a whole answer is data, not a call.
After the last call, anything other than `;` is content again.

Llama's built-in tools (`<|python_tag|>brave_search.call(query=...)`) are
not JSON and stay content, tag included, for the client to see.
Shared rules (whitespace, invalid calls) are in tool_calls.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from server.output.call_json import decode_call_object
from server.output.tool_calls import (
    BlockResult,
    ParsedToolCall,
    ToolCallParser,
    new_call_id,
    scan_blocks,
    skip_json_ws,
    skip_space,
)
from server.output.tool_stream import ToolCallStreamer

TAG = "<|python_tag|>"
ARGS_KEYS = ("parameters", "arguments")


def _read_chain(text: str, pos: int) -> BlockResult:
    """`call (; call)*` at `pos` (after optional whitespace)."""
    calls: list[ParsedToolCall] = []
    pos = skip_json_ws(text, pos)
    while True:
        found = decode_call_object(text, pos, ARGS_KEYS)
        if found is None:
            return calls, pos, False
        end, name, arguments = found
        calls.append(ParsedToolCall(name, arguments))
        pos = skip_json_ws(text, end)
        if not text.startswith(";", pos):
            return calls, pos, True
        pos = skip_json_ws(text, pos + 1)
        if not text.startswith("{", pos):
            return calls, pos, True


class Llama3JsonParser(ToolCallParser):
    name: ClassVar[str] = "llama3_json"
    openers: ClassVar[tuple[str, ...]] = (TAG,)
    markers: ClassVar[tuple[str, ...]] = (TAG,)

    def parse(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        start = skip_space(text, 0)
        if not text.startswith("{", start):
            return scan_blocks(text, self.openers, _read_chain)
        calls, pos, clean = _read_chain(text, start)
        if not calls:
            return text, []
        if not clean:
            return text[pos:], calls
        content, more = scan_blocks(text, self.openers, _read_chain, pos, after_call=True)
        return content, calls + more

    def streamer(self, new_id: Callable[[], str] = new_call_id) -> ToolCallStreamer:
        return Llama3Streamer(new_id)


class Llama3Streamer(ToolCallStreamer):
    openers = (TAG,)

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(new_id)
        self._mode = "start"

    def _mode_start(self, final: bool) -> bool:
        at = skip_space(self._buf, 0)
        if at == len(self._buf) and not final:
            return False  # only whitespace so far: a bare call may follow
        if self._buf.startswith("{", at):
            self._raw, self._buf = self._buf[:at], self._buf[at:]
            self._start_call(then="separator", args_keys=ARGS_KEYS)
        else:
            self._mode = "content"
        return True

    def _enter_block(self, opener: str) -> None:
        self._after_ws("object")

    def _mode_object(self, final: bool) -> bool:
        self._start_call(then="separator", args_keys=ARGS_KEYS)
        return True

    def _mode_separator(self, final: bool) -> bool:
        self._buf = self._buf[skip_json_ws(self._buf, 0):]
        if not self._buf:
            return False
        if self._buf[0] == ";":
            self._buf = self._buf[1:]
            self._mode = "next"
        else:
            self._mode, self._skip_space = "content", True
        return True

    def _mode_next(self, final: bool) -> bool:
        self._buf = self._buf[skip_json_ws(self._buf, 0):]
        if not self._buf:
            return False
        if self._buf[0] == "{":
            self._raw = ""
            self._start_call(then="separator", args_keys=ARGS_KEYS)
        else:
            self._mode, self._skip_space = "content", True
        return True
