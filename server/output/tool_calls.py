"""Tool-call parsing: the shared types, the whole-text loop, the registry.

A model's output (decoded with special tokens kept, so `<tool_call>`,
`<|python_tag|>`, `[TOOL_CALLS]` appear literally) is content text with tool
calls embedded in a format-specific way. Every format offers two readings:

- `ToolCallParser.parse(text) -> (content, [ParsedToolCall])`, the whole
  text at once (non-streaming responses);
- `ToolCallParser.streamer(new_id)`, a `ToolCallStreamer` fed text deltas,
  yielding `ContentDelta` / `ToolCallDelta` events (streaming responses).

Rules every format follows, identically in both readings:
- Whitespace around a call is dropped (so "Let me check.\\n<tool_call>"
  gives content "Let me check."), except whitespace after a call that
  separates content before the call from content after it ("Sure" + call
  + " done" gives "Sure done", not "Suredone").
- A call that is not valid (bad JSON, no name, arguments not an object)
  is not dropped: it and EVERYTHING after it is content, verbatim,
  markers included. (Parsing does not resume: past a broken call the
  model's output is not trusted to be structured.)
- Arguments are `canonical_json` text (json_stream.py).

The streamed events concatenate to the whole parse, with one exception a
stream cannot avoid: once a call's name and the opening of its arguments
have been sent, a later syntax error or the end of the text (`max_tokens`)
cannot un-send it. The stream then ends that call as it stands (at the end
of the text, with its arguments as far as the model wrote them, a key or
number cut mid-way included) and treats the rest as content, while the
whole parse calls the block content -- unless the whole text is read as cut
(`parse_output(..., cut=True)`, what the chat route does for every answer, so a
whole answer and its stream agree however the text ended), which is the
stream's reading.

The streaming machinery every format builds on is `ToolCallStreamer`
(tool_stream.py); the whole-text loop they share is `scan_blocks` here.

Not for: reasoning (reasoning.py) or combining the two (stream.py).
"""

from __future__ import annotations

import secrets
import string
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from server.output.json_stream import JSON_WS

if TYPE_CHECKING:
    from server.output.tool_stream import ToolCallStreamer

_ID_ALPHABET = string.ascii_letters + string.digits

# The characters a function name may have: what the API accepts in `tools` (server/protocol/chat.py)
# and so what a call grammar may make a model write; a format that reads a bare name (Mistral v11's
# `name[ARGS]`) must read all of them, or a call the grammar forced comes back as content.
FUNCTION_NAME_CHARS = r"A-Za-z0-9_.:\-"


def new_call_id() -> str:
    """`call_` + 24 random alphanumerics, OpenAI's shape."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: str  # JSON text of an object


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A call's first event has `id` and `name`; later ones carry `arguments` pieces."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


def partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper prefix of a marker."""
    longest = max((len(m) for m in markers), default=1) - 1
    for k in range(min(longest, len(text)), 0, -1):
        tail = text[-k:]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


def find_first(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str] | None:
    """(position, marker) of the earliest marker occurrence, or None."""
    hits = [(i, m) for m in markers if (i := text.find(m, start)) >= 0]
    return min(hits) if hits else None


def skip_json_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in JSON_WS:
        pos += 1
    return pos


def skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


# (calls read, position after them, whether they ended cleanly). With no
# calls the block is not a call; with calls but not clean, the text from the
# position on is content (a later call in the block was broken).
BlockResult = tuple[list[ParsedToolCall], int, bool]


def scan_blocks(
    text: str,
    openers: tuple[str, ...],
    read_block: Callable[[str, int], BlockResult],
    pos: int = 0,
    after_call: bool = False,
) -> tuple[str, list[ParsedToolCall]]:
    """The whole-text reading shared by every format: content around blocks.

    `read_block(text, pos)` reads the block whose opener ends at `pos`.
    """
    content: list[str] = []
    calls: list[ParsedToolCall] = []
    while True:
        if after_call:
            # Whitespace after a call survives only between content on both sides.
            past = skip_space(text, pos)
            if past == len(text) or not any(content):
                pos = past
        hit = find_first(text, openers, pos)
        if hit is None:
            content.append(text[pos:])
            break
        at, opener = hit
        got, end, clean = read_block(text, at + len(opener))
        if not got:
            content.append(text[pos:])
            break
        content.append(text[pos:at].rstrip())
        calls.extend(got)
        if not clean:
            content.append(text[end:])
            break
        pos, after_call = end, True
    return "".join(content), calls


class ToolCallParser(ABC):
    """One tool-call format: a whole-text parse and a streaming counterpart."""

    name: ClassVar[str]
    # Literal texts that open a call; they also end an unclosed thought.
    openers: ClassVar[tuple[str, ...]]
    # Every literal text the reader looks for: kept in the generation's text even when the tokenizer
    # flags it special (server/hidden_tokens.py).
    markers: ClassVar[tuple[str, ...]]

    @abstractmethod
    def parse(self, text: str) -> tuple[str, list[ParsedToolCall]]: ...

    @abstractmethod
    def streamer(self, new_id: Callable[[], str] = new_call_id) -> ToolCallStreamer: ...


def tool_parser_names() -> tuple[str, ...]:
    return tuple(sorted(_registry()))


def get_tool_parser(name: str) -> ToolCallParser:
    """The parser registered as `name` (a family table `tool_call_format`)."""
    registry = _registry()
    if name not in registry:
        raise KeyError(f"no tool-call parser named {name!r}; known: {sorted(registry)}")
    return registry[name]()


def known_tool_parser(name: str | None) -> ToolCallParser | None:
    """The parser registered as `name`, or None for no name or one this server reads no calls in (a
    family table format without a reader here, say)."""
    registry = _registry()
    return registry[name]() if name in registry else None


def _registry() -> dict[str, type[ToolCallParser]]:
    # Imported here: the format modules import this one.
    from server.output.hermes import HermesParser
    from server.output.llama3 import Llama3JsonParser
    from server.output.mistral import MistralParser

    return {p.name: p for p in (HermesParser, Llama3JsonParser, MistralParser)}
