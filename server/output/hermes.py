"""The hermes tool-call format (Qwen2.5, Qwen3, QwQ, Hermes models).

    Let me look.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {}}
    </tool_call>

One JSON object per `<tool_call>` block. The block ends where the JSON value
ends (a `</tool_call>` inside a JSON string is data, not the closer); the
closer is then consumed if present, and its absence is forgiven (a model
stopped by a stop string or EOS right after the object still made the call).
Shared rules (whitespace, invalid calls) are in tool_calls.py.

Not for: Qwen3-Coder's XML-ish `<function=...>` bodies, which are another
format.
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
)
from server.output.tool_stream import ToolCallStreamer

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


def _read_block(text: str, pos: int) -> BlockResult:
    pos = skip_json_ws(text, pos)
    found = decode_call_object(text, pos, ("arguments",))
    if found is None:
        return [], pos, False
    end, name, arguments = found
    end = skip_json_ws(text, end)
    if text.startswith(CLOSE, end):
        end += len(CLOSE)
    return [ParsedToolCall(name, arguments)], end, True


class HermesParser(ToolCallParser):
    name: ClassVar[str] = "hermes"
    openers: ClassVar[tuple[str, ...]] = (OPEN,)
    markers: ClassVar[tuple[str, ...]] = (OPEN, CLOSE)

    def parse(self, text: str) -> tuple[str, list[ParsedToolCall]]:
        return scan_blocks(text, self.openers, _read_block)

    def streamer(self, new_id: Callable[[], str] = new_call_id) -> ToolCallStreamer:
        return HermesStreamer(new_id)


class HermesStreamer(ToolCallStreamer):
    openers = (OPEN,)

    def _enter_block(self, opener: str) -> None:
        self._after_ws("object")

    def _mode_object(self, final: bool) -> bool:
        self._start_call(then="close")
        return True

    def _mode_close(self, final: bool) -> bool:
        self._buf = self._buf[skip_json_ws(self._buf, 0):]
        if not self._buf and not final:
            return False
        if self._buf.startswith(CLOSE):
            self._buf = self._buf[len(CLOSE):]
        elif CLOSE.startswith(self._buf) and not final:
            return False  # maybe the closer, still arriving
        self._mode, self._skip_space = "content", True
        return True
