"""The FastAPI application, built by a factory.

`create_app(settings)` returns an app whose lifespan loads the model in a
background thread (so `/health` says 503 while it loads), starts the engine,
and on shutdown stops the engine and fails whatever was still running.

Auth and request counting sit in one small pure-ASGI middleware rather than
Starlette's BaseHTTPMiddleware, which interferes with streamed responses and
with noticing client disconnects.
"""

from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.requests import Request

from server.auth import check_api_key
from server.body_limit import BodyLimitMiddleware
from server.errors import APIError, install_error_handlers
from server.metrics import Metrics
from server.settings import ServeSettings
from server.state import ServerState
from server.tokenizer_thread import warm as warm_tokenizer_threads

log = logging.getLogger("anchorage.app")

_KNOWN_ROUTES = {
    "/health", "/v1/health", "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/responses", "/metrics",
    "/props", "/tokenize", "/detokenize", "/apply-template", "/slots", "/v1/messages", "/v1/messages/count_tokens",
}


def load_into(state: ServerState, on_failure=None) -> None:
    """Build the runtime into `state`; on failure record why (and call on_failure)."""
    from server.runtime import build_runtime
    from slots.identity import serving_identity
    from slots.slot_table import SlotTable

    try:
        info, engine, tokenizer, runner, token_bytes = build_runtime(state.settings)
        state.info, state.engine, state.tokenizer, state.runner, state.token_bytes = (
            info, engine, tokenizer, runner, token_bytes)
        warm_tokenizer_threads(tokenizer)
        state.slots = SlotTable(state.settings.parallel, engine.scheduler.alloc, info.max_model_len)
        engine.on_end.append(state.slots.on_end)
        state.slot_identity = serving_identity(info.spec, runner.kv_dtype_name, info.model_dir)
        if state.settings.slot_save_path is not None and not state.settings.slot_save_path.is_dir():
            raise ValueError(f"--slot-save-path {state.settings.slot_save_path} is not a directory")
        engine.start()
        state.status = "ready"
        log.info("ready: serving %s", info.served_model_name)
    except Exception as exc:
        state.status, state.error = "failed", str(exc)
        log.error("model failed to load: %s", exc, exc_info=not isinstance(exc, ValueError))
        if on_failure:
            on_failure(exc)
    finally:
        state.ready_event.set()


class GateMiddleware:
    """API key check and per-route request counting, for HTTP requests."""

    def __init__(self, app, state: ServerState, metrics: Metrics):
        self.app, self.state, self.metrics = app, state, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in _KNOWN_ROUTES else ("/slots/{id}" if path.startswith("/slots/") else "other")
        status_box = {"status": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status_box["status"] = message["status"]
            await send(message)

        try:
            try:
                # Slot actions are checked by their route, against the admin key when one is set.
                if not (scope["method"] == "POST" and path.startswith("/slots/")):
                    check_api_key(Request(scope), self.state.settings.api_key)
            except APIError as exc:
                await exc.response(path)(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.http_requests.labels(route, str(status_box["status"])).inc()


def create_app(settings: ServeSettings, *, background_load: bool = True, on_load_failure=None) -> FastAPI:
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if background_load:
            threading.Thread(target=load_into, args=(state, on_load_failure), name="anchorage-load", daemon=True).start()
        else:
            load_into(state, on_load_failure)
        yield
        if state.engine is not None:
            state.engine.shutdown()

    # No redirect for a trailing slash: a 307 with an empty body is no error a client can read, and a POST
    # followed to its new address may land on another method's route. An unknown path is a 404 like any other.
    app = FastAPI(title="anchorage", version="0.1.0", lifespan=lifespan, redirect_slashes=False)
    app.state.server = state
    metrics = Metrics(state)
    app.state.metrics = metrics
    install_error_handlers(app)

    from server.routes import chat, completions, info, messages, responses, slots, tokenize

    for module in (info, tokenize, chat, completions, responses, messages, slots):
        app.include_router(module.router)
    # Added first, so it runs inside the gate: a client without the key gets its 401, not a 413.
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_request_body_bytes)
    app.add_middleware(GateMiddleware, state=state, metrics=metrics)
    origins = [o.strip() for o in settings.allowed_origins.split(",") if o.strip()]
    if origins:
        # Outermost: a browser's preflight (OPTIONS, no key) is answered before the gate asks for the key.
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["*"], allow_headers=["*"])
    return app
