"""Wire models of `/v1/completions` (raw text in, text out).

The prompt arrives as a string, a list of token ids, or a list of either (a
batch, as OpenAI and vLLM take it, which evaluation harnesses send), and is
normalised to a list of prompts, each `str` or `list[int]`. A batch of P
prompts answers P x n choices, choice `p * n + i` being prompt p's i-th (the
OpenAI convention). The bounds: 128 prompts, 128 choices, and a named
`id_slot` only with one prompt (a slot holds one prompt's tokens).

`echo: true` puts each prompt's text before its choices' text, as OpenAI and
vLLM do; with `logprobs` the choice's logprobs start with the prompt's tokens
(prompt logprobs: each token scored by those before it, the first null).
Refused by name rather than half-done: `suffix` (fill-in-the-middle needs a
template the checkpoint may not have), `best_of` above `n` (below it is a 400, as OpenAI's rule
says; equal to it asks nothing more). `logprobs` is
OpenAI's legacy integer 0..5. `max_tokens: 0` with `echo` answers the prompt alone,
scored when `logprobs` is set.

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


# Prompts in one request, and choices (prompts x n) in one response: a bound a client can read, well
# above what a batch of evaluation prompts needs, so one request cannot queue thousands of sequences.
MAX_PROMPTS = 128
MAX_CHOICES = 128


def _token_ids(value: list, where: str) -> list[int]:
    for i, token in enumerate(value):
        if not 0 <= token <= INT32_MAX:
            raise field_error(f"{where}{i}", f"{token} is not a valid token id")
    return value


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_ids(value: list) -> bool:
    return all(_is_id(x) for x in value)


def _not_an_id(value: list, where: str) -> PydanticCustomError:
    """The error for a token id list with something else in it, naming that element."""
    i, bad = next((i, x) for i, x in enumerate(value) if not _is_id(x))
    return field_error(f"{where}{i}", f"prompt item {where}{i} is {bad!r}: a list of token ids holds integers only")


def _prompts(value: Any) -> list[str | list[int]]:
    """Every accepted prompt shape as a list of prompts (a string or a list of token ids each), as OpenAI
    and vLLM read it: a string, a list of token ids, or a list of either (a batch). A list whose first
    element is an integer is one prompt of ids; anything else in it is named by its index."""
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, list) and value and _is_id(value[0]):
        if not _is_ids(value):
            raise _not_an_id(value, "")
        value = [value]
    if not isinstance(value, list):
        raise PydanticCustomError(
            "prompt_type", "prompt must be a string, a list of token ids, or a list of those"
        )
    if not value:
        raise PydanticCustomError("empty_prompt", "prompt must not be empty")
    if len(value) > MAX_PROMPTS:
        raise PydanticCustomError("too_many_prompts", "prompt holds {n} prompts; at most {limit} in one request",
                                  {"n": len(value), "limit": MAX_PROMPTS})
    one = len(value) == 1
    out: list[str | list[int]] = []
    for p, item in enumerate(value):
        where = "" if one else f"{p}."
        # An empty string goes on: the tokenizer may still give it a BOS to continue from, as vLLM and
        # llama.cpp generate from one (engine_params refuses a prompt that comes to no token at all).
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list) and item and _is_id(item[0]):
            if not _is_ids(item):
                raise _not_an_id(item, where)
            out.append(_token_ids(item, where))
        elif isinstance(item, list) and not item:
            raise field_error(where.rstrip("."), "prompt must not be empty" if one else f"prompt {p} is an empty "
                              "list of token ids")
        else:
            raise field_error(where.rstrip("."), "prompt must be a string, a list of token ids, or a list of those "
                              f"(item {p} is neither)")
    return out


class CompletionRequest(SamplingFields):
    ignored_fields: ClassVar[frozenset[str]] = frozenset({"timings_per_token", "return_progress", "samplers"})

    prompt: list[str | list[int]]  # normalised: one entry per prompt (a batch answers prompts x n choices)
    # OpenAI's and vLLM's default for legacy completions; an explicit null leaves the context's room.
    # 0 only with echo: the prompt scored and echoed, nothing generated (OpenAI's legacy scoring call).
    max_tokens: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = 16
    # OpenAI's legacy shape: how many alternatives per token (0 = just the chosen one).
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _normalise_prompt(cls, value: Any) -> Any:
        return _prompts(value)

    @model_validator(mode="after")
    def _refused_features(self) -> CompletionRequest:
        if self.max_tokens == 0 and not self.echo:
            raise field_error("max_tokens", "max_tokens 0 generates nothing; it is allowed only with echo, to "
                              "return (and with logprobs score) the prompt")
        if self.suffix:
            raise field_error("suffix", "suffix (fill-in-the-middle) is not supported")
        if self.best_of is not None:
            # OpenAI's and vLLM's rule: best_of candidates, of which the n best come back.
            if self.best_of < self.n:
                raise field_error("best_of", f"best_of ({self.best_of}) must be at least n ({self.n})")
            if self.best_of > self.n:
                raise field_error("best_of", "best_of above n (ranking extra candidates) is not supported; use n "
                                  "for several completions")
        if len(self.prompt) * self.n > MAX_CHOICES:
            raise field_error("prompt", f"{len(self.prompt)} prompts x n={self.n} would be "
                              f"{len(self.prompt) * self.n} choices; at most {MAX_CHOICES} in one request")
        if len(self.prompt) > 1 and self.id_slot is not None and self.id_slot >= 0:
            raise field_error("id_slot", "a named id_slot holds one prompt; send the prompts one per request")
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
    stop_reason: int | str | None = None  # vLLM's: the client's stop string or stop token id that ended it
    logprobs: CompletionLogprobs | None = None
    token_ids: list[int] | None = None  # return_token_ids
    prompt_token_ids: list[int] | None = None  # return_token_ids (vLLM puts it per choice)
    prompt_logprobs: list[dict | None] | None = None  # vLLM's prompt_logprobs, per choice as vLLM puts them


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
