"""Pieces shared by the chat and completions wire models.

- `WireModel`: the base of every REQUEST model. Strict types (as OpenAI is
  strict: an integer field given `1.0`, `"1"` or `true` is a 400 naming the
  field -- we refuse `1.0` too, because OpenAI does and because a float
  there is a client bug, not a rounding need; float fields accept integers).
  Unknown fields are refused (`extra="forbid"`), except the few a model
  lists in `ignored_fields`: fields real clients send that we accept and
  drop, each documented where it is listed.
- `ResponseModel`: the base of every RESPONSE model. `None` fields are
  omitted when dumped (the OpenAI SDK tolerates absence and llama.cpp omits
  e.g. `reasoning_content` when empty), except the keys a model lists in
  `keep_null`, which OpenAI always sends (`content`, `finish_reason`,
  `logprobs`).
- `SamplingFields`: the sampling knobs both endpoints accept, with ranges.
- `Usage`, `Timings`: the accounting objects both endpoints return.
- `field_error(field, message)`: a validation error about a sub-field raised
  from an enclosing validator; `server.errors` appends `field` to the path.

Not for: converting wire values into engine parameters (that is
`to_sampling_params` in the chat route, the one seam).
"""

from __future__ import annotations

import math
import re
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from models.reasoning_plan import InvalidReasoningBudget, parse_budget

INT32_MAX = 2**31 - 1
_INT_KEY = re.compile(r"-?[0-9]+")
MAX_STOP_SEQUENCES = 16

# `max_tokens` and friends: >= 1 and bounded so an absurd value fails here,
# not as an overflow in the engine.
TokenCount = Annotated[int, Field(ge=1, le=INT32_MAX)]
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]


def field_error(field: str, message: str, kind: str = "invalid_field", code: str | None = None) -> PydanticCustomError:
    """An error about `field` (a dotted path below the validated object); `code` becomes the error's code."""
    # pydantic substitutes only `{key}` for keys of the context, so the
    # message is used as is (short of a literal "{field}").
    return PydanticCustomError(kind, message, {"field": field, **({"code": code} if code else {})})


class WireModel(BaseModel):
    """Base of request models: strict, closed, with an explicit ignore list."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    # Fields accepted and dropped without validation. Keep short; document
    # each entry at the subclass that lists it.
    ignored_fields: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _drop_ignored_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.ignored_fields:
            return {k: v for k, v in data.items() if k not in cls.ignored_fields}
        return data


def lone_surrogate_path(value: Any) -> str | None:
    """Dotted path of the first string (value or object key) in a parsed JSON `value` that holds a lone
    UTF-16 surrogate (`"\\ud800"` is valid JSON but no Unicode text: the tokenizer cannot encode it), or
    None; a bad key reports the object holding it ("" for the body's own keys)."""
    found = _first_unfit(value, finite=False)
    return found[0] if found else None


def _first_unfit(value: Any, finite: bool) -> tuple[str, str] | None:
    """(dotted path, "surrogate" or "non-finite") of the first string holding a lone surrogate or, with
    `finite`, the first number that is NaN or infinite, in a parsed JSON `value`; None if there is none.
    Walks with a stack, not recursion: the JSON parser allows deeper nesting than Python's stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _is_unicode(item):
                return path, "surrogate"
        elif isinstance(item, float):
            if finite and not math.isfinite(item):
                return path, "non-finite"
        elif isinstance(item, dict):
            if not all(_is_unicode(key) for key in item):
                return path, "surrogate"
            # Pushed last to first, so the first is looked at first.
            stack.extend((f"{path}.{key}" if path else str(key), sub) for key, sub in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}" if path else str(i), sub) for i, sub in reversed(list(enumerate(item))))
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_NULL_MEANS_DEFAULT: dict[type, frozenset[str]] = {}  # per request model: its fields where null is the default


def _accepts_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _accepts_none(get_args(annotation)[0])
    if origin is Union or origin is UnionType or origin is Literal:
        return any(arg is None or _accepts_none(arg) for arg in get_args(annotation))
    return False


class RequestBody(WireModel):
    """Base of a whole request body: its text, anywhere, must be Unicode (no lone surrogates); a top-level
    `null` for a field with a default that is no null means that default."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        # OpenAI's spec types most knobs `integer | null` or `boolean | null` (`"n": null`, `"stream": null`),
        # and clients built from it send null to mean "unset"; vLLM reads them so. A field whose own type
        # gives null a meaning (`max_tokens: null`, the context's room) keeps it.
        if not isinstance(data, dict):
            return data
        unset = cls._null_means_default()
        return {k: v for k, v in data.items() if not (v is None and k in unset)}

    @classmethod
    def _null_means_default(cls) -> frozenset[str]:
        names = _NULL_MEANS_DEFAULT.get(cls)
        if names is None:
            names = _NULL_MEANS_DEFAULT[cls] = frozenset(
                name for field_name, info in cls.model_fields.items()
                if not info.is_required() and not _accepts_none(info.annotation)
                for name in (field_name, info.alias) if name)
        return names

    @model_validator(mode="before")
    @classmethod
    def _json_values_only(cls, data: Any) -> Any:
        found = _first_unfit(data, finite=True)
        if found is None:
            return data
        path, kind = found
        if kind == "surrogate":
            # The path goes in the message as well: a lone surrogate in an object key cannot be printed.
            raise field_error(path, f"{path or 'a key of the body'} holds a lone UTF-16 surrogate "
                                    "(\\ud800-\\udfff): not Unicode text")
        # Python's parser reads NaN and Infinity, which are no JSON, and a number past a float's range as
        # infinite; echoed back (a Responses tool's schema) they would make the answer no JSON either.
        raise field_error(path, f"{path or 'the body'} is NaN or infinite: not a JSON number (NaN and Infinity are not JSON, "
                                "and a number past about 1.8e308 overflows)")


class ResponseModel(BaseModel):
    """Base of response models: omits None fields except `keep_null`."""

    model_config = ConfigDict(extra="forbid")

    keep_null: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: Any) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v is not None or k in self.keep_null}


class StreamOptions(WireModel):
    # An explicit null is the default, as vLLM reads it.
    include_usage: bool | None = False
    # vLLM's: usage on every chunk. Accepted so vLLM clients do not fail;
    # routes may honour it.
    continuous_usage_stats: bool | None = False
    # OpenAI's (the SDK types it): random padding on each delta against length side channels. Accepted and
    # unused: this server pads nothing, as vLLM and llama.cpp pad nothing.
    include_obfuscation: bool | None = None


class SamplingFields(RequestBody):
    """Sampling knobs shared by /v1/chat/completions and /v1/completions."""

    model: str | None = None
    max_tokens: TokenCount | None = None
    # vLLM's: EOS and stop_token_ids are banned, stop strings unmatched, until this many tokens are out.
    min_tokens: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    n: Annotated[int, Field(ge=1, le=128)] = 1
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    # -1 and 0 both mean "off" (vLLM uses -1, llama.cpp 0).
    top_k: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=10.0)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**64 - 1)] | None = None
    # A single string is normalised to a one-element list.
    stop: list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    # vLLM's: control tokens (`<|im_end|>`) add no text unless this is false.
    skip_special_tokens: bool = True
    # OpenAI sends token ids as JSON object keys (strings); we keep them as ints.
    logit_bias: dict[int, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # llama.cpp's name (and `thinking_budget_tokens` on chat): -1 unrestricted,
    # 0..INT32_MAX a budget. Absent or -1 defers to the server's flag.
    reasoning_budget_tokens: int | None = None
    # vLLM's: return prompt and generated token ids with the response.
    return_token_ids: bool = False
    # vLLM's: each prompt token's logprob (and rank) after the tokens before it, with this many
    # alternatives (at most vLLM's default max_logprobs, 20). Not with stream, as in vLLM.
    prompt_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    # llama.cpp's slot selection (-1 = any idle slot) and prefix reuse switch.
    id_slot: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None
    cache_prompt: bool = True
    user: str | None = None  # accepted, ignored

    @model_validator(mode="after")
    def _min_within_max(self):
        most = getattr(self, "effective_max_tokens", self.max_tokens)
        if most is not None and self.min_tokens > most:
            raise field_error("min_tokens", f"min_tokens ({self.min_tokens}) is more than max_tokens ({most})")
        return self

    @model_validator(mode="after")
    def _prompt_logprobs_whole_only(self):
        if self.prompt_logprobs is not None and self.stream:
            raise field_error("prompt_logprobs", "prompt_logprobs are not available when stream is true")
        return self

    @model_validator(mode="before")
    @classmethod
    def _thinking_alias(cls, data: Any) -> Any:
        # llama.cpp's chat name for the same field; both accepted, one value.
        if isinstance(data, dict) and "thinking_budget_tokens" in data:
            data = dict(data)
            alias = data.pop("thinking_budget_tokens")
            if alias is None:  # null: the default, as for every knob; the other name, if sent, stands
                return data
            try:  # checked here, under the name the client sent: past this point it has the other name
                parse_budget(alias, "thinking_budget_tokens")
            except InvalidReasoningBudget as exc:
                raise field_error("thinking_budget_tokens", str(exc)) from None
            if data.get("reasoning_budget_tokens") is not None and data["reasoning_budget_tokens"] != alias:
                raise field_error(
                    "reasoning_budget_tokens",
                    "reasoning_budget_tokens and thinking_budget_tokens are the same field; "
                    "they were sent with different values",
                )
            data["reasoning_budget_tokens"] = alias
        return data

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if value is not None and not isinstance(value, list):
            raise PydanticCustomError("stop_type", "stop must be a string or a list of strings")
        if isinstance(value, list):
            if len(value) > MAX_STOP_SEQUENCES:
                raise PydanticCustomError(
                    "too_many_stop_sequences",
                    "at most {limit} strings are allowed, got {n}",
                    {"limit": MAX_STOP_SEQUENCES, "n": len(value)},
                )
            for i, item in enumerate(value):
                if item == "":
                    raise field_error(str(i), "an empty string never matches; leave it out")
        return value

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _logit_bias_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[int, Any] = {}
        for key, bias in value.items():
            # Keys are JSON object keys: decimal token ids. Ints are fine when
            # a Python caller builds the request directly.
            if isinstance(key, str) and _INT_KEY.fullmatch(key):
                token = int(key)
            elif isinstance(key, int) and not isinstance(key, bool):
                token = key
            else:
                raise field_error(str(key), f"logit_bias keys must be token ids (integer strings), got {key!r}")
            if not 0 <= token <= INT32_MAX:
                raise field_error(str(key), f"logit_bias key {key!r} is not a valid token id")
            out[token] = bias
        return out

    @field_validator("reasoning_budget_tokens", mode="before")
    @classmethod
    def _budget_range(cls, value: Any) -> Any:
        if value is None:
            return value
        try:
            # One rule for the range and its llama.cpp wording (seed 001).
            return parse_budget(value, "reasoning_budget_tokens")
        except InvalidReasoningBudget as exc:
            raise PydanticCustomError("reasoning_budget", str(exc)) from None

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise field_error("stream_options", "stream_options is only allowed when stream is true")
        return self


class PromptTokensDetails(ResponseModel):
    cached_tokens: int = 0


class CompletionTokensDetails(ResponseModel):
    reasoning_tokens: int | None = None


class Usage(ResponseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None

    @classmethod
    def running(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        """The counts so far, for vLLM's `stream_options.continuous_usage_stats` (no details mid-stream)."""
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                   total_tokens=prompt_tokens + completion_tokens)

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
           reasoning_tokens: int | None = None) -> Usage:
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached_tokens),
            completion_tokens_details=(
                None if reasoning_tokens is None
                else CompletionTokensDetails(reasoning_tokens=reasoning_tokens)
            ),
        )


class Timings(ResponseModel):
    """llama.cpp's `timings`: prefix-cache hits and prefill/decode speeds."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float

    @classmethod
    def of(cls, cache_n: int, prompt_n: int, prompt_ms: float, predicted_n: int,
           predicted_ms: float) -> Timings:
        def rate(n: int, ms: float) -> float:
            return n * 1000.0 / ms if ms > 0 else 0.0

        return cls(
            cache_n=cache_n,
            prompt_n=prompt_n,
            prompt_ms=prompt_ms,
            prompt_per_second=rate(prompt_n, prompt_ms),
            predicted_n=predicted_n,
            predicted_ms=predicted_ms,
            predicted_per_second=rate(predicted_n, predicted_ms),
        )
