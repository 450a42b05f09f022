"""Wire models of `/v1/chat/completions`: the request, the response, the chunks.

The request is validated here completely -- types, ranges, cross-field rules
(a named `tool_choice` must be one of `tools`, `top_logprobs` needs
`logprobs`) -- so a route receiving a `ChatCompletionRequest` never
re-checks. Message content arrives as a string or a list of text parts and is
normalised to ONE string (parts joined with "\\n", vLLM's convention), which
is what chat templates expect; image parts are refused by name, because the
served models are text-only.

Accepted and ignored at the top level (`ignored_fields`): llama.cpp web UI's
`timings_per_token`, `return_progress` and `samplers` (our sampler order is
fixed), so that UI works unmodified (its `reasoning_format` is read), and OpenAI's routing hints `service_tier`,
`prompt_cache_key`, `safety_identifier`. `user`, `metadata` and `store` are
declared and ignored; `reasoning_effort` goes to the chat template. Every other unknown field is a 400 naming it. On
messages, the OpenAI SDK's round-trip fields `refusal`, `annotations`,
`audio`, `function_call` are ignored, and so are those its helpers add to a
message sent back as it came (`parse()`'s `parsed` and a call's
`parsed_arguments`, the stream helper's `tool_calls[].index`); `reasoning`
(newer vLLM's name) is read as `reasoning_content`.

Responses omit None fields (see `ResponseModel`), except `content`,
`finish_reason` and `logprobs`, which OpenAI always sends; `reasoning_content`
is omitted when empty, as llama.cpp does.

Not for: rendering the prompt or converting to engine parameters.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from server.output.tool_calls import FUNCTION_NAME_CHARS
from server.protocol.common import (
    ResponseModel,
    SamplingFields,
    Timings,
    TokenCount,
    Usage,
    WireModel,
    field_error,
)

Role = Literal["system", "developer", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})


def _nested(model: type[WireModel], value: Any) -> Any:
    """Validate `value` as `model`, re-raising its first error with its path."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join(str(p) for p in err["loc"])
        ctx_field = (err.get("ctx") or {}).get("field")
        if ctx_field:
            path = f"{path}.{ctx_field}" if path else str(ctx_field)
        message = err["msg"] if err["type"] != "extra_forbidden" else "unknown field"
        raise field_error(path, message) from None


def _nested_at(prefix: str, model: type[WireModel], value: Any) -> Any:
    """`_nested` for a value inside a list or object being validated: its error's path put under `prefix`
    (an item's index in its list)."""
    try:
        return _nested(model, value)
    except PydanticCustomError as exc:
        field = (exc.context or {}).get("field", "")
        raise field_error(f"{prefix}.{field}" if field else prefix, exc.message()) from None


def _content_text(value: Any) -> Any:
    """A message's content as one string (or None); refuses non-text parts."""
    if value is None or isinstance(value, str) or not isinstance(value, list):
        return value  # the declared `str | None` type reports anything else
    texts = []
    for i, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str | None):
            raise field_error(f"{i}.type", f"a content part's type must be a string, got {type(kind).__name__}")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "text":
            raise field_error(f"{i}.text", "a text content part needs a string `text`")
        elif kind in _IMAGE_PARTS:
            raise field_error(
                str(i), f"image content parts ({kind!r}) are not supported: the served model is text-only"
            )
        else:
            raise field_error(
                f"{i}.type", f"content part type {kind!r} is not supported; only 'text' parts are"
            )
    return "\n".join(texts)


class FunctionCall(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"parsed_arguments"})

    name: Annotated[str, Field(min_length=1)]
    # A JSON-encoded object, as OpenAI sends it. Kept as the client's string:
    # it may be a model's truncated output echoed back, which must not make
    # the next turn a 400. server/chat_prompt.py parses it for templates.
    arguments: str

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_are_a_string(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise PydanticCustomError(
                "arguments_type", "function.arguments must be a JSON-encoded string, not a JSON {kind}",
                {"kind": type(value).__name__},
            )
        return value


class MessageToolCall(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"index"})

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(WireModel):
    ignored_fields: ClassVar[frozenset[str]] = frozenset(
        {"refusal", "annotations", "audio", "function_call", "parsed"})

    role: Role
    content: str | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _reasoning_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "reasoning" in data and "reasoning_content" not in data:
            data = {("reasoning_content" if k == "reasoning" else k): v for k, v in data.items()}
        return data

    @field_validator("content", mode="before")
    @classmethod
    def _normalise_content(cls, value: Any) -> Any:
        return _content_text(value)

    @model_validator(mode="after")
    def _role_rules(self) -> ChatMessage:
        role = self.role
        if role != "assistant":
            for field in ("tool_calls", "reasoning_content"):
                if getattr(self, field) is not None:
                    raise field_error(field, f"{field} is only allowed on assistant messages, not {role}")
            if self.content is None:
                raise field_error("content", f"a {role} message needs content")
        # An assistant message may hold nothing at all: this server answers `content: null` for a turn that
        # wrote no answer text (only a thought, or an end of turn at once), and a client sends it back as is.
        if role == "tool" and not self.tool_call_id:
            raise field_error("tool_call_id", "a tool message needs the tool_call_id it answers")
        if role != "tool" and self.tool_call_id is not None:
            raise field_error("tool_call_id", f"tool_call_id is only allowed on tool messages, not {role}")
        return self


class FunctionDefinition(WireModel):
    name: Annotated[str, Field(pattern=f"^[{FUNCTION_NAME_CHARS}]{{1,128}}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    # Whether `parameters` is a JSON schema at all is checked with the prompt, off the event loop
    # (server/engine_params.refuse_invalid_tool_parameters): the meta-schema walk takes seconds a megabyte.


class ToolDefinition(WireModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(WireModel):
    name: str


class NamedToolChoice(WireModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(WireModel):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    # `schema` as the wire spells it; pydantic's BaseModel owns the attribute name.
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def schema_for_answer(self) -> dict | None:
        """The schema the answer must fit (any JSON object for json_object), or None for text."""
        if self.type == "json_object":
            return {"type": "object"}
        if self.type == "json_schema":
            return self.json_schema.schema_ or {}
        return None


class ChatCompletionRequest(SamplingFields):
    # OpenAI's routing and caching hints (`service_tier`, `prompt_cache_key`, `safety_identifier`) mean
    # nothing on one server whose prefix cache needs no key: accepted and dropped, as vLLM does.
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"timings_per_token", "return_progress", "samplers",
                                                          "service_tier", "prompt_cache_key", "safety_identifier"})

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # llama.cpp's (its web UI sends it on every request): "none" leaves the thought in the content as the
    # model wrote it; the others split it into reasoning_content, as this server does by default.
    reasoning_format: Literal["none", "auto", "deepseek", "deepseek-legacy"] | None = None
    max_completion_tokens: TokenCount | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: ResponseFormat | None = None
    metadata: dict[str, Any] | None = None  # accepted, ignored
    store: bool | None = None  # accepted, ignored
    # OpenAI's; handed to the chat template as `reasoning_effort`, as vLLM does: a template that reads it
    # (gpt-oss's harmony: "Reasoning: low") thinks accordingly, others ignore it. How long a thought may
    # run is capped by reasoning_budget_tokens.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # OpenAI's hint of how long an answer should be (GPT-5's `verbosity`, which LiteLLM and openai-agents'
    # ModelSettings pass on): checked, then ignored -- no chat template reads it.
    verbosity: Literal["low", "medium", "high"] | None = None
    # vLLM's: open the assistant's turn after the messages (default), or -- continue_final_message --
    # leave the final assistant message open so the model goes on with it (an answer's first words
    # written by the client); the response carries only what the model added.
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_shape(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("auto", "none", "required"):
            raise PydanticCustomError(
                "tool_choice", "tool_choice must be 'auto', 'none', 'required' or "
                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got {value}", {"value": repr(value)},
            )
        if isinstance(value, dict):
            return _nested(NamedToolChoice, value)
        return value

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format_nested(cls, value: Any) -> Any:
        return _nested(ResponseFormat, value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ChatCompletionRequest:
        if self.continue_final_message:
            if self.add_generation_prompt:
                raise field_error("continue_final_message", "continue_final_message continues the final message, "
                                  "so add_generation_prompt must be false (it would open a new turn)")
            if self.messages[-1].role != "assistant":
                raise field_error("messages", "continue_final_message needs the final message to be the "
                                  f"assistant's; it is {self.messages[-1].role!r}")
        if self.top_logprobs is not None and not self.logprobs:
            raise field_error("top_logprobs", "top_logprobs requires logprobs to be true")
        names = [t.function.name for t in self.tools or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise field_error(f"tools.{i}.function.name", f"two tools are named {name!r}")
        choice = self.tool_choice
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
            raise field_error("response_format.json_schema", "response_format json_schema needs a json_schema "
                              "object: {\"name\": ..., \"schema\": {...}}")
        if choice == "required" and not names:
            raise field_error("tool_choice", "tool_choice 'required' needs at least one tool in tools")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            known = f"one of the tools {names}" if names else "in tools (the request has none)"
            raise field_error(
                "tool_choice.function.name",
                f"tool_choice names {choice.function.name!r}, which is not {known}",
            )
        return self

    @property
    def effective_max_tokens(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# ---- responses ---------------------------------------------------------------


def new_chat_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


class ResponseFunction(ResponseModel):
    name: str
    arguments: str


class ToolCall(ResponseModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunction


class TopLogprob(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"bytes"})
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"content"})
    content: list[TokenLogprob] | None = None


class ChatCompletionMessage(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"content"})
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None

    @field_validator("reasoning_content", "tool_calls")
    @classmethod
    def _empty_is_absent(cls, value: Any) -> Any:
        return value or None


class ChatCompletionChoice(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"finish_reason", "logprobs"})
    index: int
    message: ChatCompletionMessage
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None  # vLLM's: the client's stop string or stop token id that ended it
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None  # return_token_ids


class ChatCompletion(ResponseModel):
    id: str = Field(default_factory=new_chat_id)
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    timings: Timings | None = None
    prompt_token_ids: list[int] | None = None  # return_token_ids
    prompt_logprobs: list[dict | None] | None = None  # vLLM's prompt_logprobs (of the rendered prompt)


class DeltaFunction(ResponseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(ResponseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunction | None = None


class ChoiceDelta(ResponseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: Any) -> Any:
        # The opening delta is `{"role": "assistant", "content": null}`
        # (llama.cpp, OpenAI); every later delta carries only what changed.
        data = handler(self)
        keep = {"content"} if self.role is not None else set()
        return {k: v for k, v in data.items() if v is not None or k in keep}


class ChunkChoice(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"finish_reason", "logprobs"})
    index: int
    delta: ChoiceDelta
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None  # vLLM's: the client's stop string or stop token id that ended it
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(ResponseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    timings: Timings | None = None
    prompt_token_ids: list[int] | None = None
