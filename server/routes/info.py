"""The small routes: health, models, props, metrics (tokens and templates: routes/tokenize.py).

`/health` answers 503 while the model loads and 200 once it serves (llama.cpp
and load balancers expect exactly that). `/v1/models` and `/health` are the
public pair that needs no API key.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from server.generation import check_model
from server.runtime import served_name

router = APIRouter()
STARTED = int(time.time())


def _state(request: Request):
    return request.app.state.server


# HEAD answers as GET does, for load balancers; only GET is in the OpenAPI schema (one route with both
# methods gave two operations with one id, which FastAPI warns about).
@router.get("/health")
@router.get("/v1/health")
@router.head("/health", include_in_schema=False)
@router.head("/v1/health", include_in_schema=False)
async def health(request: Request):
    state = _state(request)
    if state.status == "ready":
        return {"status": "ok"}
    body = {"error": {"message": "the model is still loading" if state.status == "loading"
                      else f"the model failed to load: {state.error}",
                      "type": "unavailable_error", "param": None, "code": None}}
    return JSONResponse(body, status_code=503)


def _model(info) -> dict:
    return {
        "id": info.served_model_name, "object": "model", "created": STARTED, "owned_by": "anchorage",
        "max_model_len": info.max_model_len,
        "meta": {"architecture": info.spec.architecture, "n_ctx_train": info.spec.max_position_embeddings,
                 "n_vocab": info.spec.vocab_size},
    }


@router.get("/v1/models")
@router.head("/v1/models", include_in_schema=False)
async def models(request: Request):
    state = _state(request)
    if state.status == "loading":
        # As llama.cpp answers while it loads: the id (known from the settings) and no metadata yet, so a
        # model picker works before the first request can run.
        return {"object": "list", "data": [{"id": served_name(state.settings), "object": "model", "created": STARTED,
                                            "owned_by": "anchorage", "meta": None}]}
    state.require_ready()
    return {"object": "list", "data": [_model(state.info)]}


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request):
    """OpenAI's retrieve (the SDK's `models.retrieve`); a served name may hold a slash (`Qwen/Qwen3-8B`)."""
    state = _state(request)
    state.require_ready()
    check_model(model_id, state)
    return _model(state.info)


def _token_text(tokenizer, name: str) -> str:
    return getattr(tokenizer, name, None) or ""


@router.get("/props")
async def props(request: Request):
    state = _state(request)
    state.require_ready()
    info, s = state.info, state.settings
    return {
        "model_path": str(info.model_dir),
        "model_alias": info.served_model_name,
        "total_slots": s.parallel,
        "chat_template": info.chat_template or "",
        "n_ctx": info.max_model_len,
        "build_info": "anchorage",
        # llama.cpp's: what clients (its web UI, others strictly) read; the served models are text-only.
        "modalities": {"vision": False, "audio": False},
        "bos_token": _token_text(state.tokenizer, "bos_token"),
        "eos_token": _token_text(state.tokenizer, "eos_token"),
        "endpoint_slots": True, "endpoint_props": True, "endpoint_metrics": True, "webui": False,
        "default_generation_settings": {"n_ctx": info.max_model_len, "params": info.generation_defaults},
        "reasoning_format": info.reasoning.name if info.reasoning else None,
        "reasoning_budget": s.reasoning_budget,
        "tool_call_format": info.family.tool_call_format if info.family else None,
        "anchors": {"enabled": s.anchors, "token": info.anchor_token, "description": info.anchor_line},
        "kv_pool": {"page_size": info.page_size, "pages": info.pages,
                    "sliding_window": info.spec.sliding_window},
    }


@router.get("/metrics")
async def metrics(request: Request):
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
