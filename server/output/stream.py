"""The streaming output parser: text deltas in, OpenAI delta events out.

`StreamingOutputParser` chains the two stages a generation goes through:
reasoning separation (reasoning.py) and tool-call parsing (the format's
`ToolCallStreamer`). The engine's incremental detokenizer feeds it text
(special tokens kept); it returns events:

- `ReasoningDelta(text)` -> `delta.reasoning_content`
- `ContentDelta(text)` -> `delta.content`
- `ToolCallDelta(index, id, name)` then `ToolCallDelta(index, arguments=...)`
  pieces -> `delta.tool_calls[...]`

Concatenating the events of every `feed` and `finish` gives exactly the
whole-text `parse_output` of the same text, wherever the text was split
(tests check this over random split points), except for a call broken after
it was announced (tool_calls.py explains); the chat and Responses routes read
every whole generation as the stream reads it (`parse_output(..., cut=True)`). `has_tool_calls` tells the route
to report `finish_reason: "tool_calls"`.

`coalesce(events)` merges neighbours of one kind (fewer SSE chunks), and
`delta_dict(event)` is the OpenAI `delta` object for one event; both are for
the route, which owns chunk framing.

Not for: detokenizing, stop strings, or SSE framing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.output.reasoning import ReasoningStream, resolve_markers
from server.output.tool_calls import (
    ContentDelta,
    ReasoningDelta,
    ToolCallDelta,
    ToolCallParser,
    get_tool_parser,
    new_call_id,
)

DeltaEvent = ReasoningDelta | ContentDelta | ToolCallDelta


def resolve_tool_parser(tool_format: str | ToolCallParser | None) -> ToolCallParser | None:
    if tool_format is None or isinstance(tool_format, ToolCallParser):
        return tool_format
    return get_tool_parser(tool_format)


class StreamingOutputParser:
    def __init__(
        self,
        reasoning_format: Any = None,
        tool_format: str | ToolCallParser | None = None,
        prompt_opened: bool = False,
        new_id: Callable[[], str] = new_call_id,
    ) -> None:
        """`reasoning_format`: None, a name, a family-table format or markers."""
        markers = resolve_markers(reasoning_format)
        parser = resolve_tool_parser(tool_format)
        self._reasoning = ReasoningStream(markers, prompt_opened, parser.openers if parser else ())
        self._tools = parser.streamer(new_id) if parser else None

    @property
    def has_tool_calls(self) -> bool:
        return self._tools is not None and self._tools.has_calls

    def feed(self, text: str) -> list[DeltaEvent]:
        return self._route(self._reasoning.feed(text), final=False)

    def finish(self) -> list[DeltaEvent]:
        return self._route(self._reasoning.finish(), final=True)

    def _route(self, events: list[ReasoningDelta | ContentDelta], final: bool) -> list[DeltaEvent]:
        out: list[DeltaEvent] = []
        for event in events:
            if isinstance(event, ContentDelta) and self._tools is not None:
                out.extend(self._tools.feed(event.text))
            else:
                out.append(event)
        if final and self._tools is not None:
            out.extend(self._tools.finish())
        return coalesce(out)


def coalesce(events: list[DeltaEvent]) -> list[DeltaEvent]:
    """Merge adjacent reasoning, content, or argument pieces of one call."""
    out: list[DeltaEvent] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + event.text)
        elif isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + event.text)
        elif (
            isinstance(event, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and event.id is None
            and last.id is None  # the announcing event stays alone, as OpenAI sends it
            and last.index == event.index
        ):
            out[-1] = ToolCallDelta(last.index, last.arguments + event.arguments, last.id, last.name)
        else:
            out.append(event)
    return out


def delta_dict(event: DeltaEvent) -> dict[str, Any]:
    """The OpenAI `delta` object for one event."""
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text}
    if isinstance(event, ContentDelta):
        return {"content": event.text}
    call: dict[str, Any] = {"index": event.index}
    function: dict[str, Any] = {"arguments": event.arguments}
    if event.id is not None:
        call.update(id=event.id, type="function")
        function = {"name": event.name, "arguments": event.arguments}
    call["function"] = function
    return {"tool_calls": [call]}
