"""Content blocks of Anthropic's Messages API: what a message's `content` may hold, and its text.

`text`, `thinking` (and `redacted_thinking`), `tool_use`, `tool_result` and
`document` blocks, validated with errors that name their fields, plus how a
tool result or a document reads as prompt text. A `document` of text (a
`text` or `content` source) is rendered in the XML wrapping Anthropic's
long-context prompting advice uses; PDFs, URLs and uploaded files are
refused by name, since the served models are text-only.

Not here: messages, tools and the request (server/protocol/messages.py).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from server.protocol.chat import _nested, _nested_at
from server.protocol.common import WireModel, field_error


# Anthropic's fields on blocks and tools that change no prompt here: prompt-caching hints (this server caches
# every prefix by itself), citations, and the tool-search and programmatic-calling labels.
HINTS = frozenset({"cache_control", "citations", "toolset_name", "caller"})


class TextBlock(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = HINTS

    type: Literal["text"]
    text: str


class ThinkingBlock(WireModel):
    # `signature`: Anthropic's seal over a thought; this server writes none and checks none.
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"signature", *HINTS})

    type: Literal["thinking"]
    thinking: str


class RedactedThinkingBlock(WireModel):
    """A thought Anthropic encrypted: opaque here, so it adds nothing to the prompt."""
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlock(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = HINTS

    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, Any]


class PlainTextSource(WireModel):
    type: Literal["text"]
    media_type: Literal["text/plain"] = "text/plain"
    data: str


class ContentSource(WireModel):
    """A document given as content blocks: text only here (an image among them is refused by name)."""
    type: Literal["content"]
    content: str | list[TextBlock]

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        return text_blocks(value)

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)


# Anthropic's document sources the served (text-only) models cannot read, and what to send instead.
_UNREADABLE_SOURCES = {"base64": "a PDF", "url": "a PDF behind a URL", "file": "a file uploaded to Anthropic"}


class DocumentBlock(WireModel):
    """A document the client hands the model: a plain-text or text-content source, with an optional title and
    context. It reaches the prompt as text, in the XML wrapping Anthropic's long-context prompting advice uses
    (`render`); PDFs, URLs and uploaded files are refused by name."""
    ignored_fields: ClassVar[frozenset[str]] = HINTS

    type: Literal["document"]
    source: PlainTextSource | ContentSource
    title: str | None = None
    context: str | None = None

    @field_validator("source", mode="before")
    @classmethod
    def _source(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if isinstance(kind, str) and kind in _UNREADABLE_SOURCES:
            raise field_error("type", f"{_UNREADABLE_SOURCES[kind]} ({kind!r} source) cannot be read: the served "
                              "model is text-only; send the document's text as a 'text' or 'content' source")
        if kind == "text":
            return _nested(PlainTextSource, value)
        if kind == "content":
            return _nested(ContentSource, value)
        raise field_error("type", f"a document's source is 'text' or 'content' here; got {kind!r}")

    def render(self) -> str:
        body = self.source.data if isinstance(self.source, PlainTextSource) else self.source.text()
        head = "".join(f"<{tag}>{value}</{tag}>\n" for tag, value in (("source", self.title),
                                                                        ("context", self.context))
                       if value is not None)
        return f"<document>\n{head}<document_content>\n{body}\n</document_content>\n</document>\n"


class ToolResultBlock(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = HINTS

    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[TextBlock | DocumentBlock] = ""
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        return text_blocks(value, documents=True)

    def text(self) -> str:
        body = self.content if isinstance(self.content, str) else "".join(block_text(b) for b in self.content)
        # The model reads a failed call's result as one: Anthropic's API tells it so too.
        return f"Error: {body}" if self.is_error and not body.startswith("Error") else body


def text_blocks(value: Any, documents: bool = False) -> Any:
    """Content that may be a string or a list of text blocks (the system prompt's, a document's), or of text and
    document blocks (a tool result's)."""
    if not isinstance(value, list):
        return value
    out = []
    allowed = ("text", "document") if documents else ("text",)
    for i, block in enumerate(value):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:  # (a kind that is no string is named by its repr, never hashed)
            raise field_error(f"{i}.type", f"only {' and '.join(allowed)} blocks are supported here, got {kind!r}")
        out.append(_nested_at(str(i), DocumentBlock if kind == "document" else TextBlock, block))
    return out


def block_text(block: TextBlock | DocumentBlock) -> str:
    return block.render() if isinstance(block, DocumentBlock) else block.text


BLOCKS: dict[str, type[WireModel]] = {"text": TextBlock, "document": DocumentBlock, "thinking": ThinkingBlock,
                                      "redacted_thinking": RedactedThinkingBlock, "tool_use": ToolUseBlock,
                                      "tool_result": ToolResultBlock}
Block = TextBlock | DocumentBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock
