"""Responses API stream events from the output parser's deltas.

What it is for: `/v1/responses` with `stream: true`. The streaming output
parser (server/output/stream.py) reads a generation as reasoning, content and
tool-call deltas, as it does for chat; this turns them into the Responses
event sequence: each output item is announced (`response.output_item.added`),
filled (`response.reasoning_text.delta`, `response.output_text.delta`,
`response.function_call_arguments.delta`) and closed (`...done`,
`response.output_item.done`) before the next one opens, in output order --
a thought, a message, then one item per call.

Why it is shaped so: the SDK's stream accumulator checks the sequence (an
item's deltas after its `added`, the same item identity in its `done`, every
added item done before `response.completed`), so the writer keeps one open
item at a time and closes it whenever a delta of another kind arrives, and
`finish` closes the last. Every event carries a `sequence_number`, in order.
The finished items are kept: the final `response.completed` carries them.

Not for: SSE framing or the request's lifecycle (server/routes/responses.py).
"""

from __future__ import annotations

import secrets
from typing import Any

from server.output.tool_calls import ContentDelta, ReasoningDelta, ToolCallDelta
from server.protocol.carried_thought import seal


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


class ResponsesEventWriter:
    def __init__(self, carry_thoughts: bool = False) -> None:
        # Reasoning items carry their thought as `encrypted_content` (server/protocol/carried_thought.py).
        self.carry_thoughts = carry_thoughts
        self.sequence = 0
        self.items: list[dict[str, Any]] = []  # finished output items, in order
        self._open: dict[str, Any] | None = None  # the item being written
        self._call_index: int | None = None  # the parser's index of the open call
        self.incomplete = False  # the generation was cut: the item still open closes as incomplete

    def event(self, kind: str, **fields) -> dict[str, Any]:
        out = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return out

    # -- deltas --------------------------------------------------------------------------
    def feed(self, delta, logprobs: list[dict] = ()) -> list[dict[str, Any]]:
        """Events for one parser delta; `logprobs`, of a content delta, are its text's tokens' (when asked)."""
        if isinstance(delta, ReasoningDelta):
            return self._text("reasoning", delta.text)
        if isinstance(delta, ContentDelta):
            return self._text("message", delta.text, logprobs)
        assert isinstance(delta, ToolCallDelta)
        out: list[dict[str, Any]] = []
        if delta.id is not None or self._call_index != delta.index:
            out += self._close()
            self._call_index = delta.index
            item = {"type": "function_call", "id": new_item_id("fc"), "call_id": delta.id or new_item_id("call"),
                    "name": delta.name or "", "arguments": "", "status": "in_progress"}
            out += self._add(item)
        if delta.arguments:
            self._open["arguments"] += delta.arguments
            out.append(self.event("response.function_call_arguments.delta", item_id=self._open["id"],
                                  output_index=len(self.items), delta=delta.arguments))
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Events that close the last open item."""
        return self._close()

    def items_so_far(self) -> list[dict[str, Any]]:
        """The output as a client reading the events has it now: the closed items, and the open one as far
        as it got (`incomplete`), for a turn that ends without finishing."""
        if self._open is None:
            return list(self.items)
        item = _copy(self._open)
        if "status" in item:
            item["status"] = "incomplete"
        self._carry(item)
        return [*self.items, item]

    # -- items -----------------------------------------------------------------------------
    def _text(self, kind: str, text: str, logprobs: list[dict] = ()) -> list[dict[str, Any]]:
        if not text:
            return []
        out: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            out += self._close()
            if kind == "reasoning":
                item = {"type": "reasoning", "id": new_item_id("rs"), "summary": [], "content": []}
                part = {"type": "reasoning_text", "text": ""}
            else:
                item = {"type": "message", "id": new_item_id("msg"), "role": "assistant", "status": "in_progress",
                        "content": []}
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self._add(item)
            item["content"].append(part)
            out.append(self.event("response.content_part.added", item_id=item["id"], output_index=len(self.items),
                                  content_index=0, part=dict(part)))
        part = self._open["content"][0]
        part["text"] += text
        kind_event = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": list(logprobs)}
        if kind == "message":
            part["logprobs"] = [*part["logprobs"], *logprobs]  # a new list: events already sent keep theirs
        out.append(self.event(kind_event, item_id=self._open["id"], output_index=len(self.items), content_index=0,
                              delta=text, **extra))
        return out

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self._open = item
        return [self.event("response.output_item.added", output_index=len(self.items), item=_copy(item))]

    def _close(self) -> list[dict[str, Any]]:
        item, self._open, self._call_index = self._open, None, None
        if item is None:
            return []
        index = len(self.items)
        status = "incomplete" if self.incomplete else "completed"
        out: list[dict[str, Any]] = []
        if item["type"] == "function_call":
            item["status"] = status
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                  name=item["name"], arguments=item["arguments"]))
        else:
            part = item["content"][0]
            if item["type"] == "reasoning":
                self._carry(item)
                out.append(self.event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=part["text"]))
            else:
                item["status"] = status
                out.append(self.event("response.output_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=part["text"], logprobs=part["logprobs"]))
            out.append(self.event("response.content_part.done", item_id=item["id"], output_index=index,
                                  content_index=0, part=dict(part)))
        out.append(self.event("response.output_item.done", output_index=index, item=_copy(item)))
        self.items.append(item)
        return out


    def _carry(self, item: dict[str, Any]) -> None:
        if self.carry_thoughts and item["type"] == "reasoning":
            item["encrypted_content"] = seal(item["content"][0]["text"])


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "content": [dict(p) for p in item["content"]]} if "content" in item else dict(item)
