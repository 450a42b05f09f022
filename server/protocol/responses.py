"""Wire models of OpenAI's Responses API (`POST /v1/responses`), and its translation to a chat request.

What it is for: agent SDKs that speak the Responses API (the OpenAI Agents
SDK's default model, Codex-style clients) send `input` items -- messages,
`function_call`s the model made, `function_call_output`s, `reasoning` items
passed back -- with flat `tools` (`{"type": "function", "name", ...}`). This
module validates that shape (errors name its fields: `input.3.call_id`) and
turns it into the chat request the server already renders, constrains and
parses (`to_chat_body`): one template path, one tool-call grammar, one
reasoning parser for both APIs.

Why a translation: a Responses turn is a chat turn with other spelling. A
reasoning item passed back becomes the next assistant message's
`reasoning_content`, so the template replays the thought and the new prompt
starts with the tokens the server ran (prefix cache and tool-call anchor
reuse it, as for chat). A turn named by `previous_response_id` is the stored
turn's items (server/responses_store.py), its output, then this input:
`to_chat_body(history)` renders them as one conversation. `conversation`
objects are not kept and are refused by name.

Items are stored as the dicts a client would send back (`item_record`, with
ids, as `GET /v1/responses/{id}/input_items` lists them) and read again with
the same models (`item_from_record`).

Not for: the response objects and events (server/routes/responses.py,
server/output/responses_events.py).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from server.protocol.carried_thought import unseal
from server.protocol.chat import FunctionDefinition, _nested, _nested_at
from server.protocol.common import RequestBody, TokenCount, WireModel, field_error
from server.protocol.responses_truncation import kept


def _text_of(value: str | list[TextPart]) -> str:
    """A text field that may come as parts, as one string."""
    return value if isinstance(value, str) else "".join(p.text for p in value)


class TextPart(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"annotations", "logprobs"})

    type: Literal["input_text", "output_text", "text", "reasoning_text", "summary_text"]
    text: str


class MessageItem(WireModel):
    # `phase` ("commentary", "final_answer"): OpenAI's label of an assistant message, which a client
    # sending back an output item dumped by the SDK's types carries; it changes no prompt.
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"id", "status", "phase"})

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart]

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        for i, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("input_text", "output_text", "text"):
                raise field_error(f"{i}.type", f"only text parts are supported, got {kind!r}")
        return [_nested_at(str(i), TextPart, part) for i, part in enumerate(value)]

    def text(self) -> str:
        return _text_of(self.content)


class FunctionCallItem(WireModel):
    # The SDK's types carry `async`, `caller` and `namespace` (null on this server's calls) on every call
    # item they dump: a client sending back our own output must not be refused for them.
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"id", "async", "caller", "namespace"})

    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str
    # "incomplete": a call cut by max_output_tokens or a cancel, which no tool can run (unpaired_call).
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"id", "status", "name", "caller", "namespace"})

    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[TextPart]

    def text(self) -> str:
        return _text_of(self.output)


class ReasoningItem(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"id", "status"})

    type: Literal["reasoning"]
    summary: list[TextPart] = []
    content: list[TextPart] | None = None
    # This server's carried thought (server/protocol/carried_thought.py), or another provider's (unread).
    encrypted_content: str | None = None

    @field_validator("encrypted_content")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                unseal(value)
            except ValueError as exc:
                raise field_error("", str(exc)) from None
        return value

    def text(self) -> str:
        # The thought itself when the client kept it, or as this server carried it in encrypted_content;
        # else its summary (this server's summary is empty).
        if self.content:
            return _text_of(self.content)
        carried = unseal(self.encrypted_content) if self.encrypted_content is not None else None
        return carried if carried is not None else _text_of(self.summary)


ITEMS: dict[str, type[WireModel]] = {"message": MessageItem, "function_call": FunctionCallItem,
                                     "function_call_output": FunctionCallOutputItem, "reasoning": ReasoningItem}
InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem

_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def item_record(item: InputItem, item_id: str) -> dict[str, Any]:
    """An input item as stored and listed: OpenAI's spelling (text in typed parts), with an id."""
    record: dict[str, Any] = {"id": item_id, **item.model_dump(exclude_none=True)}
    if isinstance(item, MessageItem):
        kind = "output_text" if item.role == "assistant" else "input_text"
        record["content"] = [{"type": kind, "text": item.text()}]
        record["status"] = "completed"
    elif isinstance(item, FunctionCallItem | FunctionCallOutputItem):
        record["status"] = record.get("status") or "completed"  # a call sent back as cut stays cut
    return record


def item_from_record(record: dict[str, Any]) -> InputItem:
    """A stored item (an input record or an output item this server wrote) read as the input item it is."""
    return ITEMS[record["type"]].model_validate(record)


def new_record_id(item: InputItem, token: str) -> str:
    return f"{_ID_PREFIX[item.type]}_{token}"


class FunctionTool(FunctionDefinition):
    """A Responses tool: chat's function definition, flat, with its `type` beside it."""

    type: Literal["function"]


class NamedFunctionChoice(WireModel):
    type: Literal["function"]
    name: str


class TextFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_named(self) -> TextFormat:
        # OpenAI types both as required for json_schema: a format without them is a client's mistake.
        if self.type == "json_schema":
            for field, value in (("name", self.name), ("schema", self.schema_)):
                if value is None:
                    raise field_error(field, f"{field} is required when type is json_schema")
        return self


class TextOptions(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"verbosity"})

    format: TextFormat | None = None

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        return _nested(TextFormat, value) if isinstance(value, dict) else value


class ReasoningOptions(WireModel):
    # `effort` goes to the chat template as chat's `reasoning_effort` does; `summary` is not produced.
    # reasoning_budget_tokens (this server's, llama.cpp's) caps how long a thought runs.
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


OUTPUT_TEXT_LOGPROBS = "message.output_text.logprobs"
CARRIED_THOUGHT = "reasoning.encrypted_content"
# What OpenAI's `include` may name (the SDK's ResponseIncludable): a typo is a 400, not silently nothing.
Includable = Literal["file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
                     "message.input_image.image_url", "computer_call_output.output.image_url",
                     "code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs"]


class ResponsesStreamOptions(WireModel):
    # OpenAI's only option here: random padding on each event against length side channels. Accepted (the
    # SDK types it) and unused: this server pads nothing.
    include_obfuscation: bool | None = None


class ResponsesRequest(RequestBody):
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    stream: bool = False
    stream_options: ResponsesStreamOptions | None = None
    # This server's (and llama.cpp's): a thinking budget, checked and applied as on chat.
    reasoning_budget_tokens: int | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    store: bool = True  # OpenAI's default: kept for previous_response_id and GET /v1/responses/{id}
    # Answer at once (`queued`) and run on; the client polls GET /v1/responses/{id}, or cancels.
    background: bool = False
    metadata: dict[str, str] | None = None  # stored and echoed, as OpenAI does
    # `include`: OUTPUT_TEXT_LOGPROBS gives each output_text its tokens' logprobs, with `top_logprobs`
    # alternatives each; CARRIED_THOUGHT gives each reasoning item its thought as `encrypted_content`;
    # the other parts it may name this server does not produce (search results, images), so they are
    # checked as OpenAI types them and dropped.
    include: list[Includable] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    # "auto": a conversation over the context drops its oldest turns to fit (server/protocol/responses_truncation.py);
    # "disabled" (the default) answers it with a 400, as OpenAI does.
    truncation: Literal["auto", "disabled"] | None = None
    # Checked as OpenAI types them, then unused: a client's mistake in them is still a 400 naming the field.
    # Identifiers and routing hints change no answer on one server whose prefix cache needs no key.
    user: str | None = None
    safety_identifier: Annotated[str, Field(max_length=64)] | None = None
    prompt_cache_key: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    client_metadata: dict[str, str] | None = None  # Codex's (installation and session ids): labels, unread

    @field_validator("input", mode="before")
    @classmethod
    def _items(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if not value:
            raise field_error("", "input must hold at least one item")
        out = []
        for i, item in enumerate(value):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            model = ITEMS.get(kind) if isinstance(kind, str) else None
            if model is None:
                raise field_error(f"{i}.type", f"input items may be {sorted(ITEMS)}; got {kind!r}")
            out.append(_nested_at(str(i), model, item))
        return out

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        # OpenAI's limits, so a client that works here works there.
        if value is None:
            return value
        if len(value) > 16:
            raise field_error("", f"metadata holds at most 16 pairs, got {len(value)}")
        for key, text in value.items():
            if len(key) > 64:
                raise field_error(key, "metadata keys are at most 64 characters")
            if len(text) > 512:
                raise field_error(key, "metadata values are at most 512 characters")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        for i, tool in enumerate(value):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise field_error(f"{i}.type", f"only function tools are supported, got {kind!r}")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        return _nested(NamedFunctionChoice, value) if isinstance(value, dict) else value

    @field_validator("text", "reasoning", "stream_options", mode="before")
    @classmethod
    def _options(cls, value: Any, info) -> Any:
        model = {"text": TextOptions, "reasoning": ReasoningOptions}.get(info.field_name, ResponsesStreamOptions)
        return _nested(model, value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _refused(self) -> ResponsesRequest:
        if self.conversation is not None:
            raise field_error("conversation", "conversation objects are not kept on this server: name the last "
                              "turn with previous_response_id, or send the conversation so far as input items")
        if self.stream_options is not None and not self.stream:
            raise field_error("stream_options", "stream_options is only allowed when stream is true")
        return self

    @property
    def text_logprobs(self) -> bool:
        """The output text's tokens' logprobs are asked for (with `top_logprobs` alternatives each)."""
        return OUTPUT_TEXT_LOGPROBS in (self.include or ())

    @property
    def carried_thought(self) -> bool:
        """Reasoning items are to carry their thought as `encrypted_content`."""
        return CARRIED_THOUGHT in (self.include or ())

    def items(self) -> list[InputItem]:
        """This turn's own input as items (text input is one user message)."""
        return [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else list(self.input)

    def all_items(self, history: list[InputItem] = ()) -> list[InputItem]:
        """The items this turn renders: `history` (a stored turn's items and output), then its own input."""
        return [*history, *self.items()]

    def unpaired_call(self, history: list[InputItem] = ()) -> tuple[str, str] | None:
        """(param, message) of the first call left unpaired in the conversation, as OpenAI refuses it: a
        `function_call_output` answering no call before it, or a finished call (this turn's input's or a
        stored turn's; a call cut short is `incomplete` and needs no answer) that no output answers; None
        when every call and output pair up."""
        unanswered: dict[str, None] = {}  # call ids in order
        called: set[str] = set()
        for i, item in enumerate(self.all_items(history)):
            if isinstance(item, FunctionCallItem):
                if item.status != "incomplete":  # a cut call cannot be run, so nothing must answer it
                    unanswered[item.call_id] = None
                called.add(item.call_id)
            elif isinstance(item, FunctionCallOutputItem):
                if item.call_id not in called:
                    at = i - len(history)
                    return (f"input.{at}.call_id", f"input.{at}.call_id: no function call found for function call "
                            f"output with call_id {item.call_id!r}")
                unanswered.pop(item.call_id, None)
        if unanswered:
            call_id = next(iter(unanswered))
            return "input", f"input: no function_call_output found for function call {call_id!r}; answer every call"
        return None

    def to_chat_body(self, history: list[InputItem] = (), start: int = 0) -> dict[str, Any]:
        """The chat completion request this turn is: messages, tools, choice and knobs in chat's spelling.

        `history` is what came before this turn's input (a stored turn's items and output); this turn's
        `instructions` lead it, as OpenAI does not carry a previous turn's instructions over. `start`, for
        `truncation: "auto"`, is where in `all_items(history)` the kept turns begin
        (server/protocol/responses_truncation.py).
        """
        messages: list[dict[str, Any]] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        items = kept(self.all_items(history), start)
        thought: str | None = None  # a reasoning item waits for the assistant message it belongs to

        def assistant() -> dict[str, Any]:
            # The open assistant message: the last one if nothing came after it, else a new one.
            nonlocal thought
            if not messages or messages[-1]["role"] != "assistant" or thought is not None:
                messages.append({"role": "assistant", "content": ""})
            if thought is not None:
                messages[-1]["reasoning_content"] = thought
                thought = None
            return messages[-1]

        for item in items:
            if isinstance(item, ReasoningItem):
                thought = (thought or "") + item.text()
            elif isinstance(item, MessageItem) and item.role == "assistant":
                msg = assistant()
                msg["content"] += item.text()
            elif isinstance(item, FunctionCallItem):
                msg = assistant()
                msg.setdefault("tool_calls", []).append(
                    {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}})
            else:
                if thought is not None:  # a thought that led to no answer or call (a turn cut inside it)
                    assistant()
                if isinstance(item, MessageItem):
                    role = "system" if item.role == "developer" else item.role
                    if role == "system" and messages and all(m["role"] == "system" for m in messages):
                        # `instructions` and the developer messages leading the input (Codex's shape) are one
                        # system turn: templates that take a single leading system message refuse two.
                        messages[0]["content"] += "\n\n" + item.text()
                    else:
                        messages.append({"role": role, "content": item.text()})
                else:  # FunctionCallOutputItem
                    messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        if thought is not None:
            assistant()
        body: dict[str, Any] = {"messages": messages}
        if self.tools:
            # `strict` asks the API to hold calls to the schema, which the call grammar does for every tool;
            # it is no part of the tool the model reads (chat clients rarely send it).
            body["tools"] = [{"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type", "strict"})}
                             for t in self.tools]
        if isinstance(self.tool_choice, NamedFunctionChoice):
            body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice.name}}
        elif self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.reasoning is not None and self.reasoning.effort is not None:
            body["reasoning_effort"] = self.reasoning.effort
        fmt = self.text.format if self.text else None
        if fmt is not None and fmt.type == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": fmt.name or "response", "schema": fmt.schema_ or {}, "strict": fmt.strict}}
        elif fmt is not None and fmt.type == "json_object":
            body["response_format"] = {"type": "json_object"}
        if self.text_logprobs:
            body["logprobs"], body["top_logprobs"] = True, self.top_logprobs or 0
        for ours, theirs in (("parallel_tool_calls", "parallel_tool_calls"), ("max_output_tokens", "max_completion_tokens"),
                             ("temperature", "temperature"), ("top_p", "top_p"),
                             ("reasoning_budget_tokens", "reasoning_budget_tokens"), ("model", "model")):
            value = getattr(self, ours)
            if value is not None:
                body[theirs] = value
        return body
