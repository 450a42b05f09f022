"""Text, tokens and templates without generation: /tokenize, /detokenize, /apply-template.

`/tokenize` answers three forms, told apart by their key, because clients of
both peers call it: llama.cpp's `{"content"}`, vLLM's `{"prompt"}` and vLLM's
`{"messages", ...}` -- a chat request rendered exactly as
/v1/chat/completions would render it, so an agent can count a conversation's
tokens, or check that its next turn starts with the tokens the last one ran
(the prefix the cache and the tool-call anchor reuse), before sending it.
`/apply-template` (llama.cpp) answers the same rendering as text.

Everything that touches the tokenizer or the template runs on a tokenizer
thread (`off_loop`), answer bytes included: a body may carry millions of
tokens, and the event loop serves every other request meanwhile.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from server.chat_prompt import render_chat
from server.errors import InvalidRequestError
from server.generation import body_size, check_model
from server.protocol import (
    ChatRenderRequest,
    CountedTokens,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizePromptRequest,
    TokenizeRequest,
)
from server.tokenizer_thread import off_loop

router = APIRouter()

# The key that names each /tokenize form; a body with several is read as the first listed.
FORMS: dict[str, type[BaseModel]] = {"messages": ChatRenderRequest, "prompt": TokenizePromptRequest,
                                     "content": TokenizeRequest}


def _state(request: Request):
    state = request.app.state.server
    state.require_ready()
    return state


def _validated(model: type[BaseModel], body: dict[str, Any]):
    """`body` as `model`, its errors reported as any route's body errors are (param = the field's path)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def _json(payload) -> Response:
    # Separators and ensure_ascii as FastAPI's JSONResponse writes them.
    return Response(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
                    media_type="application/json")


@router.post("/tokenize")
async def tokenize(body: Annotated[dict[str, Any], Body()], request: Request):
    state = _state(request)
    key = next((k for k in FORMS if k in body), None)
    if key is None:
        raise InvalidRequestError("content is required: /tokenize takes `content` (llama.cpp's form), or "
                                  "`prompt` or `messages` (vLLM's)", param="content")
    # The whole answer, JSON text included, is built on a tokenizer thread: for a prompt of millions
    # of tokens, building a piece per token and serialising them took tens of seconds, and on the
    # event loop that held every other request (measured: /health waited 41 s behind a 2.6 MB
    # /tokenize with pieces, 2.4 s without them). The body is checked there too: validating a list of
    # millions of ids took seconds of its own.
    return await off_loop(_tokenize_answer, state, FORMS[key], body, text_size=await body_size(request))


def _tokenize_answer(state, form: type[BaseModel], body: dict[str, Any]) -> Response:
    """The /tokenize answer in the shape of the form asked (run on a tokenizer thread)."""
    req = _validated(form, body)
    check_model(req.model, state)
    if isinstance(req, TokenizeRequest):
        ids = _mixed_ids(state, req)
        pieces = [{"id": i, "piece": _piece(state.token_bytes(i))} for i in ids] if req.with_pieces else None
        return _json({"tokens": pieces if pieces is not None else ids})
    if isinstance(req, TokenizePromptRequest):
        ids = state.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)
    else:
        rendered = render_chat(req, state.tokenizer, state.info.reasoning)
        ids = rendered.token_ids if not req.add_special_tokens else \
            state.tokenizer.encode(rendered.text, add_special_tokens=True)
    strs = state.tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    counted = CountedTokens(count=len(ids), max_model_len=state.info.max_model_len, tokens=ids, token_strs=strs)
    return _json(counted.model_dump(mode="json"))


def _mixed_ids(state, req: TokenizeRequest) -> list[int]:
    """llama.cpp's tokenize_mixed: each string tokenized (the checkpoint's BOS only before a first one,
    with add_special), each id kept."""
    parts = [req.content] if isinstance(req.content, str) else req.content
    vocab = state.info.spec.vocab_size
    ids: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, int):
            if part >= vocab:
                raise InvalidRequestError(f"token id {part} is outside the vocabulary (size {vocab})",
                                          param=f"content.{i}")
            ids.append(part)
        else:
            ids += state.tokenizer.encode(part, add_special_tokens=req.add_special and i == 0,
                                          split_special_tokens=not req.parse_special)
    return ids


def _piece(raw: bytes) -> str | list[int]:
    """A token's text, or its bytes as ints when alone they are not UTF-8 (part of a character)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _render(state, req: ChatRenderRequest):
    return render_chat(req, state.tokenizer, state.info.reasoning)


@router.post("/apply-template")
async def apply_template(req: ChatRenderRequest, request: Request):
    """llama.cpp's: the prompt text a chat request renders to (generation prompt included), not run."""
    state = _state(request)
    check_model(req.model, state)
    # The tokenizer is read on the thread (its own copy there), not fetched here on the event loop.
    prompt = await off_loop(_render, state, req, text_size=await body_size(request))
    return {"prompt": prompt.text}


@router.post("/detokenize")
async def detokenize(body: Annotated[dict[str, Any], Body()], request: Request):
    state = _state(request)
    # Checked and decoded on a tokenizer thread (the lane for large texts when the body is large): a body
    # may carry millions of ids, and validating them alone took seconds.
    text = await off_loop(_detokenize, state, body, text_size=await body_size(request))
    return DetokenizeResponse(content=text, prompt=text).model_dump()


def _detokenize(state, body: dict[str, Any]) -> str:
    """The text of the body's `tokens` (run on a tokenizer thread)."""
    req = _validated(DetokenizeRequest, body)
    check_model(req.model, state)
    tokens = req.tokens
    vocab = state.info.spec.vocab_size
    for i, t in enumerate(tokens):
        if t >= vocab:
            raise InvalidRequestError(f"token id {t} is outside the vocabulary (size {vocab})", param=f"tokens.{i}")
    return state.tokenizer.decode(tokens, skip_special_tokens=False)
