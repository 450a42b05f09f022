"""Wire models of `/v1/completions` (raw text in, text out).

The prompt arrives as a string, a list holding one string, a list of token
ids, or a list holding one list of token ids, and is normalised to `str` or
`list[int]`. More than one prompt is refused with a 400 naming `prompt`:
batching is the scheduler's job across requests, and answering n prompts in
one response would need per-prompt choice bookkeeping nobody asked for.

Refused by name rather than half-done: `echo: true` (echo with `logprobs`
needs prompt logprobs, which the engine does not compute), `suffix`
(fill-in-the-middle needs a template the checkpoint may not have), `best_of`
other than 1. `logprobs` is OpenAI's legacy integer 0..5.

Not for: chat (server/protocol/chat.py) or engine parameters.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from server.protocol.common import INT32_MAX, ResponseModel, SamplingFields, Timings, TokenCount, Usage, field_error

FinishReason = Literal["stop", "length"]


def _one_prompt(value: Any) -> Any:
    """str | list[int] from every accepted prompt shape."""
    if isinstance(value, str):
        if not value:
            raise PydanticCustomError("empty_prompt", "prompt must not be empty")
        return value
    if not isinstance(value, list):
        raise PydanticCustomError(
            "prompt_type", "prompt must be a string, a list of token ids, or a list with one of those"
        )
    if not value:
        raise PydanticCustomError("empty_prompt", "prompt must not be empty")
    if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        for i, token in enumerate(value):
            if not 0 <= token <= INT32_MAX:
                raise field_error(str(i), f"{token} is not a valid token id")
        return value
    if all(isinstance(x, str | list) for x in value):
        if len(value) > 1:
            raise PydanticCustomError(
                "batched_prompt",
                "prompt holds {n} prompts; send one prompt per request", {"n": len(value)},
            )
        return _one_prompt(value[0])
    raise PydanticCustomError(
        "prompt_type", "prompt must be a string, a list of token ids, or a list with one of those"
    )


class CompletionRequest(SamplingFields):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"timings_per_token", "return_progress", "samplers"})

    prompt: str | list[int]
    # OpenAI's and vLLM's default for legacy completions; an explicit null leaves the context's room.
    max_tokens: TokenCount | None = 16
    # OpenAI's legacy shape: how many alternatives per token (0 = just the chosen one).
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _normalise_prompt(cls, value: Any) -> Any:
        return _one_prompt(value)

    @model_validator(mode="after")
    def _refused_features(self) -> CompletionRequest:
        if self.echo:
            raise field_error("echo", "echo is not supported: the engine does not compute prompt logprobs")
        if self.suffix:
            raise field_error("suffix", "suffix (fill-in-the-middle) is not supported")
        if self.best_of not in (None, 1):
            raise field_error("best_of", "best_of is not supported; use n for several completions")
        return self


def new_completion_id() -> str:
    return "cmpl-" + secrets.token_hex(12)


class CompletionLogprobs(ResponseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(ResponseModel):
    keep_null: ClassVar[frozenset[str]] = frozenset({"finish_reason", "logprobs"})
    index: int
    text: str
    finish_reason: FinishReason | None = None
    logprobs: CompletionLogprobs | None = None
    token_ids: list[int] | None = None  # return_token_ids
    prompt_token_ids: list[int] | None = None  # return_token_ids (vLLM puts it per choice)


class Completion(ResponseModel):
    """A whole completion, and (with `object` unchanged, as OpenAI does) a stream chunk."""

    id: str = Field(default_factory=new_completion_id)
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    timings: Timings | None = None


class CompletionChunk(Completion):
    """A streamed piece: same shape; `usage` only on the final usage chunk (and the counts so far on every
    chunk under `stream_options.continuous_usage_stats`)."""
