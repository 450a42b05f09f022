"""Anthropic Messages content blocks and stream events from the output parser's deltas.

What it is for: `/v1/messages`. The streaming output parser
(server/output/stream.py) reads a generation as reasoning, content and
tool-call deltas, as it does for chat; this turns them into content blocks --
`thinking`, `text`, `tool_use` -- and, for a stream, the events that build
them: `content_block_start`, its `content_block_delta`s (`thinking_delta`,
`text_delta`, `input_json_delta`) and `content_block_stop`, one block at a
time, in output order.

Why it is shaped so: Anthropic's SDK accumulates a stream by block index (a
delta goes to the block at its index, which must have started), so the writer
keeps one open block and closes it whenever a delta of another kind, or of
another call, arrives; `finish` closes the last. A whole answer is read by
the same writer, so whole and stream agree block for block. A call's `input`
is its arguments read as JSON the way the SDK reads a streamed one --
partially, so a call cut by `max_tokens` keeps what it had -- and `{}` when
not even a prefix of an object was written. The server writes no thought
signatures: a `thinking` block's `signature` is empty; with `thinking.display`
"omitted" a thought's block is written without its text.

Not for: the message envelope, stop reasons or usage (server/routes/messages.py).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from pydantic_core import from_json

from server.output.tool_calls import ContentDelta, ReasoningDelta, ToolCallDelta


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _finite(value: Any) -> Any:
    """`value` without the numbers past float range (a JSON reader makes 1e400 infinity), which no JSON
    response can carry; the call readers refuse them (json_stream), so only a call cut there holds one."""
    def kept(v: Any) -> bool:
        return not isinstance(v, float) or math.isfinite(v)

    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items() if kept(v)}
    if isinstance(value, list):
        return [_finite(v) for v in value if kept(v)]
    return value


def call_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as its `input` object: read partially, as the SDK reads streamed input JSON."""
    try:
        value = from_json(arguments, allow_partial=True, allow_inf_nan=False) if arguments.strip() else {}
    except ValueError:
        return {}
    return _finite(value) if isinstance(value, dict) else {}


class MessagesEventWriter:
    def __init__(self, omit_thinking: bool = False) -> None:
        self.omit_thinking = omit_thinking  # `thinking.display: "omitted"`: thinking blocks, without their text
        self.blocks: list[dict[str, Any]] = []  # content blocks in order; the open one, if any, is last
        self._open: dict[str, Any] | None = None
        self._call_index: int | None = None  # the parser's index of the open call
        self._arguments: dict[int, str] = {}  # each tool_use block's arguments as written, by block index

    @property
    def calls(self) -> list[str]:
        """The arguments text of each call, in order."""
        return [self._arguments[i] for i, block in enumerate(self.blocks) if block["type"] == "tool_use"]

    def feed(self, delta) -> list[dict[str, Any]]:
        """Events for one parser delta."""
        if isinstance(delta, ReasoningDelta):
            return self._text("thinking", delta.text)
        if isinstance(delta, ContentDelta):
            return self._text("text", delta.text)
        assert isinstance(delta, ToolCallDelta)
        out: list[dict[str, Any]] = []
        if delta.id is not None or self._call_index != delta.index:
            out += self._close()
            self._call_index = delta.index
            out += self._start({"type": "tool_use", "id": new_id("toolu"), "name": delta.name or "", "input": {}})
        if delta.arguments:
            index = len(self.blocks) - 1
            self._arguments[index] = self._arguments.get(index, "") + delta.arguments
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": delta.arguments}})
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Events that close the last open block."""
        return self._close()

    def content(self) -> list[dict[str, Any]]:
        """The blocks as a whole answer carries them: each call's `input` read from its arguments."""
        out = []
        for i, block in enumerate(self.blocks):
            if block["type"] == "tool_use":
                block = {**block, "input": call_input(self._arguments.get(i, ""))}
            out.append(dict(block))
        return out

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        out: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            out += self._close()
            out += self._start({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                               else {"type": "text", "text": ""})
        if kind == "thinking" and self.omit_thinking:
            return out
        self._open[kind] += text
        delta = {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        out.append({"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta})
        return out

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        self._open = block
        self.blocks.append(block)
        return [{"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": dict(block)}]

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open, self._call_index = None, None
        return [{"type": "content_block_stop", "index": len(self.blocks) - 1}]
