"""Wire models of `/tokenize`, `/detokenize` and `/apply-template`.

llama.cpp's `/tokenize`: `{"content", "add_special", "parse_special",
"with_pieces"}` -> `{"tokens"}` (`content` a string, or a list mixing strings
and token ids, as llama.cpp's tokenize_mixed reads it), where a token is an id, or with `with_pieces`
an `{"id", "piece"}` object whose piece is the token's text -- or its bytes as
a list of ints when the token alone is not valid UTF-8 (a fragment of a
multi-byte character), which is llama.cpp's answer to the same problem.
`/detokenize`: `{"tokens"}` -> `{"content"}`, and the same text as `prompt`
for vLLM's clients.

vLLM's `/tokenize` forms, told apart by their key: `{"prompt",
"add_special_tokens"}` (a completion prompt) and `{"messages", ...}` (a chat
request, rendered as /v1/chat/completions renders it, `add_generation_prompt`
on by default) -> `{"count", "max_model_len", "tokens"}` (+ `token_strs` with
`return_token_strs`). llama.cpp's `/apply-template` takes a chat request and
answers the rendered prompt, `{"prompt"}`: what the server would run for it.

Not for: the tokenizer itself (models/).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator

from server.protocol.chat import ChatCompletionRequest
from server.protocol.common import INT32_MAX, RequestBody, ResponseModel, TokenId, WireModel, field_error


class TokenizeRequest(RequestBody):
    model: str | None = None  # vLLM's and the openai SDK's clients name it on every form
    # Text, or llama.cpp's mixed form: strings and token ids in one list, ids passed through as they are.
    content: str | list[str | TokenId]
    # Add the checkpoint's BOS/EOS the way a prompt would get them.
    add_special: bool = False
    # Read `<think>`-style markers in `content` as their special tokens.
    parse_special: bool = True
    with_pieces: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _mixed(cls, value: Any) -> Any:
        # Named by position, not by pydantic's union branches ("content.str: Input should be a valid string").
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise field_error("", "content must be a string, or a list of strings and token ids")
        for i, part in enumerate(value):
            if not (isinstance(part, str) or (type(part) is int and 0 <= part <= INT32_MAX)):
                raise field_error(str(i), f"must be a string or a token id (an integer from 0), got {part!r}")
        return value


class TokenizePromptRequest(RequestBody):
    """vLLM's completion form."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class ChatRenderRequest(ChatCompletionRequest):
    """A chat request rendered, not run: vLLM's chat form of /tokenize and llama.cpp's /apply-template.
    Every chat field validates as /v1/chat/completions validates it; the sampling ones change nothing."""

    return_token_strs: bool = False  # /tokenize only
    # /tokenize only, vLLM's: also the tokenizer's own special tokens (a BOS) around the rendered text. Off
    # by default: the template writes what the model needs, and the chat route sends it as rendered.
    add_special_tokens: bool = False


class CountedTokens(ResponseModel):
    """vLLM's /tokenize answer."""

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class TokenPiece(ResponseModel):
    id: int
    piece: str | list[int]


class TokenizeResponse(ResponseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(RequestBody):
    model: str | None = None  # vLLM's clients name it
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    content: str  # llama.cpp's name
    prompt: str  # vLLM's name for the same text
