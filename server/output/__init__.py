"""From generated text to the assistant message: reasoning, content, tool calls.

Whole text: `parse_output(text, reasoning_format, tool_format, prompt_opened)`.
Streaming: `StreamingOutputParser` (stream.py). The two agree (see stream.py).

Modules: reasoning.py (marker pairs), tool_calls.py (shared types, the
streaming machinery, the registry), hermes.py / llama3.py / mistral.py (the
formats), call_json.py and json_stream.py (reading one JSON call, whole or
incrementally).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from server.output.reasoning import ReasoningMarkers, ReasoningStream, resolve_markers, split_reasoning
from server.output.stream import DeltaEvent, StreamingOutputParser, coalesce, delta_dict, resolve_tool_parser
from server.output.tool_calls import (
    ContentDelta,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallDelta,
    ToolCallParser,
    get_tool_parser,
    new_call_id,
    tool_parser_names,
)


@dataclass(frozen=True)
class ParsedOutput:
    reasoning: str
    content: str
    tool_calls: list[ParsedToolCall] = field(default_factory=list)

    def tool_calls_payload(self, new_id: Callable[[], str] = new_call_id) -> list[dict[str, Any]]:
        """OpenAI `message.tool_calls`, with fresh ids."""
        return [
            {"id": new_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.tool_calls
        ]


def parse_output(
    text: str,
    reasoning_format: Any = None,
    tool_format: str | ToolCallParser | None = None,
    prompt_opened: bool = False,
    cut: bool = False,
    pieces: list[str] | None = None,
) -> ParsedOutput:
    """The whole-text reading of one generation. `cut`: read it as its stream is -- a call announced
    before the text ended (at max_tokens, at the client's stop, or the model's own end with no grammar
    holding the call) stays a call, its arguments as far as they got, as OpenAI returns a cut call -- so
    a streamed and a whole response of one generation agree (the chat route always asks for this).
    `pieces`: the text as the generation's events brought it, fed one by one as the stream feeds them: a
    call the stream announced and the model then broke (`{"a": True}`) stays the call it was there."""
    if cut:
        return _folded(StreamingOutputParser(reasoning_format, tool_format, prompt_opened), pieces or [text])
    parser = resolve_tool_parser(tool_format)
    reasoning, content = split_reasoning(
        text, resolve_markers(reasoning_format), prompt_opened, parser.openers if parser else ()
    )
    if parser is None:
        return ParsedOutput(reasoning, content)
    content, calls = parser.parse(content)
    return ParsedOutput(reasoning, content, calls)


def _folded(stream: StreamingOutputParser, pieces: list[str]) -> ParsedOutput:
    """The stream's events over `pieces` fed in turn, gathered into one message."""
    reasoning, content, calls = [], [], {}
    events = [event for piece in pieces for event in stream.feed(piece)] + stream.finish()
    for event in events:
        if isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ContentDelta):
            content.append(event.text)
        else:
            name, arguments = calls.get(event.index, (event.name, ""))
            calls[event.index] = (name or event.name, arguments + (event.arguments or ""))
    return ParsedOutput("".join(reasoning), "".join(content),
                        [ParsedToolCall(name, arguments) for _, (name, arguments) in sorted(calls.items())])


__all__ = [
    "ContentDelta",
    "DeltaEvent",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ReasoningMarkers",
    "ReasoningStream",
    "StreamingOutputParser",
    "ToolCallDelta",
    "ToolCallParser",
    "coalesce",
    "delta_dict",
    "get_tool_parser",
    "new_call_id",
    "parse_output",
    "resolve_markers",
    "split_reasoning",
    "tool_parser_names",
]
