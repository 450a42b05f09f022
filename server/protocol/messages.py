"""Wire models of Anthropic's Messages API (`POST /v1/messages`), and its translation to a chat request.

What it is for: agent clients built on Anthropic's SDK (coding agents among
them) send `messages` whose content is typed blocks -- `text`, the model's
`thinking` and `tool_use` passed back, the client's `tool_result` -- with
`tools` as `{name, description, input_schema}` and a thinking budget as
`thinking.budget_tokens`. This module validates that shape (errors name its
fields: `messages.2.content.0.tool_use_id`) and turns it into the chat
request the server already renders, constrains and parses (`to_chat_body`),
as the Responses API does: one template path, one tool-call grammar, one
reasoning parser for every API.

Why a translation: a Messages turn is a chat turn with other spelling. A
`thinking` block passed back becomes its assistant message's
`reasoning_content`, so the template replays the thought and the next prompt
starts with the tokens the server ran (the prefix cache and the tool-call
anchor reuse them). `thinking: {"type": "enabled", "budget_tokens": N}` is
the server's reasoning budget N (llama.cpp's semantics: the thought is cut
after N tokens), `{"type": "disabled"}` a budget of 0; without `thinking` the
model thinks as the server's default says, as on chat. A final assistant
message is a prefill: the answer goes on from its words (chat's
`continue_final_message`). A `document` block of text (a `text` or
`content` source; in a user turn or a tool result) reaches the prompt as text,
wrapped in `<document>` tags with its title and context. Images, PDFs and
Anthropic's server-side tools are refused by name: the served models are
text-only and run no tools themselves.

Not for: the content blocks themselves (server/protocol/messages_blocks.py),
the response objects and events (server/output/messages_events.py,
server/routes/messages.py).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from server.protocol.chat import FUNCTION_NAME_CHARS, _nested, _nested_at
from server.protocol.common import INT32_MAX, RequestBody, WireModel, field_error
from server.protocol.messages_blocks import (BLOCKS, HINTS, Block, DocumentBlock, TextBlock, ThinkingBlock,
                                             ToolResultBlock, ToolUseBlock, block_text, text_blocks)


_ROLE_BLOCKS = {"user": ("text", "document", "tool_result"),
                "assistant": ("text", "thinking", "redacted_thinking", "tool_use")}
_MEDIA = frozenset({"image", "search_result", "container_upload"})


class Message(WireModel):
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @field_validator("content", mode="before")
    @classmethod
    def _blocks(cls, value: Any, info) -> Any:
        if not isinstance(value, list):
            return value
        role = info.data.get("role")
        out = []
        for i, block in enumerate(value):
            kind = block.get("type") if isinstance(block, dict) else None
            kind = kind if isinstance(kind, str) else repr(kind) if kind is not None else None
            if kind in _MEDIA:
                raise field_error(f"{i}.type", f"{kind} blocks are not supported: the served model is text-only")
            if kind not in BLOCKS:
                raise field_error(f"{i}.type", f"content blocks may be {sorted(BLOCKS)}; got {kind!r}")
            if role in _ROLE_BLOCKS and kind not in _ROLE_BLOCKS[role]:
                raise field_error(f"{i}.type", f"a {role} message holds no {kind} block")
            out.append(_nested_at(str(i), BLOCKS[kind], block))
        return out

    def blocks(self) -> list[Block]:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else list(self.content)


class Tool(WireModel):
    # Anthropic's hints about how its own platform streams, loads and lets code call a tool: no prompt of
    # this server's changes with them. (`strict` is kept: the call grammar holds every tool to its schema.)
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"eager_input_streaming", "defer_loading", "input_examples",
                                                          "allowed_callers", *HINTS})

    type: Literal["custom"] | None = None
    name: Annotated[str, Field(pattern=f"^[{FUNCTION_NAME_CHARS}]{{1,128}}$")]
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None

    @field_validator("input_schema")
    @classmethod
    def _object(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":  # a call's input is an object, as Anthropic's API requires
            raise field_error("type", f"a tool's input_schema is an object's schema: its type is 'object', got "
                              f"{value.get('type')!r}")
        return value


class ToolChoice(WireModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(WireModel):
    # "adaptive" and "between_tools" leave when to think to the model: here, to the server's default.
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    display: Literal["summarized", "omitted"] | None = None  # "omitted": thinking blocks carry no text


class OutputFormat(WireModel):
    type: Literal["json_schema"]
    schema_: Annotated[dict[str, Any], Field(alias="schema")]


class OutputConfig(WireModel):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None  # to the template, as chat's reasoning_effort
    format: OutputFormat | None = None  # the answer's JSON schema, held by the grammar as chat's response_format

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        return _nested(OutputFormat, value) if isinstance(value, dict) else value


class MessagesBody(RequestBody):
    """What a turn and a token count share: the conversation, its tools and its options."""

    # Accepted and dropped, as they change no answer here: `metadata.user_id` (abuse tracking), routing and
    # placement hints (`service_tier`, `speed`, `inference_geo`), `diagnostics`, and the top-level
    # `cache_control` (this server caches every prefix by itself).
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"metadata", "service_tier", "speed", "inference_geo",
                                                          "diagnostics", "cache_control"})

    model: str | None = None
    messages: list[Message]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if not value:
            raise field_error("", "messages must hold at least one message")
        return [_nested_at(str(i), Message, m) for i, m in enumerate(value)]

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, value: Any) -> Any:
        return text_blocks(value)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for i, tool in enumerate(value):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind is not None and kind != "custom":
                raise field_error(f"{i}.type", f"only client tools (type 'custom' or none) are supported: this "
                                  f"server runs no tools itself, got {kind!r}")
            out.append(_nested_at(str(i), Tool, tool))
        return out

    @field_validator("tool_choice", "thinking", "output_config", mode="before")
    @classmethod
    def _options(cls, value: Any, info) -> Any:
        model = {"tool_choice": ToolChoice, "thinking": Thinking, "output_config": OutputConfig}[info.field_name]
        value = _nested(model, value) if isinstance(value, dict) else value
        if isinstance(value, ToolChoice) and (value.type == "tool") != (value.name is not None):
            raise field_error("name", "tool_choice names a tool exactly when its type is 'tool'")
        if isinstance(value, Thinking) and value.type == "enabled" and value.budget_tokens is None:
            raise field_error("budget_tokens", "thinking of type 'enabled' needs budget_tokens")
        return value

    @model_validator(mode="after")
    def _tool_history(self) -> MessagesBody:
        """Anthropic's rules for a conversation, checked turn by turn (consecutive messages of one role are one
        turn): no empty message but a final assistant one; each tool_use id once, each answered by a
        tool_result in the next turn, whose results come before its text and answer only those calls; a final
        assistant turn (a prefill) holds no call and ends in no whitespace."""
        for i, message in enumerate(self.messages):
            if not message.content and not (i == len(self.messages) - 1 and message.role == "assistant"):
                raise field_error(f"messages.{i}.content", "a message must not be empty (only a final assistant "
                                  "message may be)")
        seen: set[str] = set()
        pending: list[str] = []  # the ids of the last assistant turn's calls, not yet answered
        turns = _turns(self.messages)
        for t, (role, first, placed) in enumerate(turns):
            if role == "user":
                text_seen = False
                for path, block in placed:
                    if not isinstance(block, ToolResultBlock):
                        text_seen = True
                        continue
                    if text_seen:
                        raise field_error(path, "a turn's tool_result blocks come before its text")
                    if block.tool_use_id not in pending:
                        raise field_error(f"{path}.tool_use_id", f"tool_result answers {block.tool_use_id!r}, which "
                                          "is no unanswered tool_use of the assistant turn just before it")
                    pending.remove(block.tool_use_id)
                if pending:
                    raise field_error(f"messages.{first}", f"tool_use ids {pending} have no tool_result in the user "
                                      "turn right after them")
                continue
            for path, block in placed:
                if isinstance(block, ToolUseBlock):
                    if block.id in seen:
                        raise field_error(f"{path}.id", f"tool_use id {block.id!r} is used twice")
                    seen.add(block.id)
                    pending.append(block.id)
            if t == len(turns) - 1:  # a prefill
                if pending:
                    raise field_error(f"messages.{first}", "a final assistant message is a prefill the answer goes "
                                      "on from, so it holds no tool_use: send the results in a user message after it")
                texts = [(path, b.text) for path, b in placed if isinstance(b, TextBlock)]
                if texts and texts[-1][1] != texts[-1][1].rstrip():
                    raise field_error(texts[-1][0], "a final assistant message (a prefill) must not end in "
                                      "whitespace")
        if self.output_config is not None and self.output_config.format is not None and self.has_prefill:
            raise field_error("output_config.format", "a JSON output format cannot go on from a prefill (a final "
                              "assistant message): its grammar holds the whole answer from the first character")
        return self

    @property
    def has_prefill(self) -> bool:
        """The conversation ends in an assistant turn with words in it, which the answer goes on from. An empty
        final assistant message (Anthropic allows one) is no prefill: the model answers a fresh turn."""
        return _ends_in_assistant(self._turns_asked())

    def _turns_asked(self) -> list[tuple[str, int, list[tuple[str, Block]]]]:
        """The turns the model reads: an empty final assistant turn (no text, no thought) is dropped."""
        turns = _turns(self.messages)
        if turns and turns[-1][0] == "assistant" and not any(
                (isinstance(b, TextBlock) and b.text) or (isinstance(b, ThinkingBlock) and b.thinking)
                for _, b in turns[-1][2]):
            turns.pop()
        return turns

    @property
    def thinking_omitted(self) -> bool:
        """The client asked for thinking blocks without their text."""
        return self.thinking is not None and self.thinking.display == "omitted"

    def system_text(self) -> str | None:
        if self.system is None or isinstance(self.system, str):
            return self.system or None
        return "".join(b.text for b in self.system) or None

    def to_chat_body(self) -> dict[str, Any]:
        """The chat completion request this turn is: messages, tools, choice and knobs in chat's spelling."""
        messages: list[dict[str, Any]] = []
        system = self.system_text()
        if system:
            messages.append({"role": "system", "content": system})
        calls: list[str] = []  # the call ids of the last assistant turn, in the order it made them
        turns = self._turns_asked()
        for role, _, placed in turns:
            blocks = [block for _, block in placed]
            if role == "assistant":
                messages.append(_assistant(blocks))
                calls = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
                continue
            # Results in the order of the calls they answer: templates render no ids, so the model pairs a
            # result with a call by place (Anthropic pairs them by id, whatever order they come in).
            results = sorted((b for b in blocks if isinstance(b, ToolResultBlock)),
                             key=lambda b: calls.index(b.tool_use_id))
            for block in results:
                messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text()})
            text = [block_text(b) for b in blocks if isinstance(b, (TextBlock, DocumentBlock))]
            if text or not results:
                messages.append({"role": "user", "content": "".join(text)})
        body: dict[str, Any] = {"messages": messages}
        if _ends_in_assistant(turns):
            # Anthropic's prefill: the answer goes on from the final assistant message's words (vLLM's
            # continue_final_message), and carries only what the model added.
            body["add_generation_prompt"], body["continue_final_message"] = False, True
        if self.tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, **({"description": t.description} if t.description is not None else {}),
                "parameters": t.input_schema}} for t in self.tools]
        choice = self.tool_choice
        if choice is not None:
            body["tool_choice"] = ({"type": "function", "function": {"name": choice.name}} if choice.type == "tool"
                                   else {"auto": "auto", "any": "required", "none": "none"}[choice.type])
            if choice.disable_parallel_tool_use:
                body["parallel_tool_calls"] = False
        if self.thinking is not None and self.thinking.type in ("enabled", "disabled"):
            body["reasoning_budget_tokens"] = 0 if self.thinking.type == "disabled" else self.thinking.budget_tokens
        config = self.output_config
        if config is not None and config.effort is not None:
            # Chat's (and the templates') highest effort is "xhigh": Anthropic's "max" asks for the most there is.
            body["reasoning_effort"] = "xhigh" if config.effort == "max" else config.effort
        if config is not None and config.format is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output",
                                                                              "schema": config.format.schema_}}
        if self.stop_sequences is not None:
            body["stop"] = self.stop_sequences
        for field in ("temperature", "top_p", "top_k", "model", "max_tokens", "stream"):
            value = getattr(self, field, None)
            if value is not None:
                body[field] = value
        return body


class MessagesRequest(MessagesBody):
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)]
    stream: bool = False


class CountTokensRequest(MessagesBody):
    """`/v1/messages/count_tokens`: a turn's prompt without the knobs of its generation."""


def _turns(messages: list[Message]) -> list[tuple[str, int, list[tuple[str, Block]]]]:
    """The conversation as Anthropic reads it: consecutive messages of one role are one turn. Each turn is its
    role, the index of its first message, and its blocks in order, each with the path it came from."""
    turns: list[tuple[str, int, list[tuple[str, Block]]]] = []
    for i, message in enumerate(messages):
        placed = [(f"messages.{i}" if isinstance(message.content, str) else f"messages.{i}.content.{j}", block)
                  for j, block in enumerate(message.blocks())]
        if turns and turns[-1][0] == message.role:
            turns[-1][2].extend(placed)
        else:
            turns.append((message.role, i, placed))
    return turns


def _ends_in_assistant(turns: list[tuple[str, int, list[tuple[str, Block]]]]) -> bool:
    return bool(turns) and turns[-1][0] == "assistant"


def _assistant(blocks: list[Block]) -> dict[str, Any]:
    """One assistant message from its blocks: the thought, the text, the calls (the template orders them)."""
    msg: dict[str, Any] = {"role": "assistant", "content": ""}
    for block in blocks:
        if isinstance(block, ThinkingBlock):
            msg["reasoning_content"] = msg.get("reasoning_content", "") + block.thinking
        elif isinstance(block, TextBlock):
            msg["content"] += block.text
        elif isinstance(block, ToolUseBlock):
            msg.setdefault("tool_calls", []).append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
    return msg


# Chat fields and the Messages fields they come from, for errors the chat pipeline finds. A chat message
# is no Messages message one for one (the system prompt adds one, a tool result is one of its own), so
# any message path names `messages`.
FIELDS = (("messages", "messages"), ("max_tokens", "max_tokens"), ("stop", "stop_sequences"),
          ("tool_choice.function", "tool_choice"), ("reasoning_budget_tokens", "thinking.budget_tokens"),
          ("parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
          ("response_format.json_schema.schema", "output_config.format.schema"),
          ("response_format", "output_config.format"), ("reasoning_effort", "output_config.effort"))


def messages_param(chat: str | None) -> str | None:
    """The Messages field a chat request's field came from (`tools.0.function.parameters` -> `tools.0.input_schema`)."""
    if not chat:
        return chat
    for theirs, ours in FIELDS:
        if chat == theirs or chat.startswith(theirs + "."):
            return ours if ours == "messages" else ours + chat[len(theirs):]
    parts = chat.split(".")
    if len(parts) >= 3 and parts[0] == "tools" and parts[2] == "function":
        rest = parts[3:]
        if rest[:1] == ["parameters"]:
            rest = ["input_schema", *rest[1:]]
        return ".".join(["tools", parts[1], *rest])
    return chat
