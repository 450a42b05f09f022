"""Typed API errors and the handlers that turn every failure into one envelope.

Every failure a client can cause leaves the server as
`{"error": {"message", "type", "param", "code"}}` with the right status --
llama.cpp's and OpenAI's shape, which SDKs already parse -- except on the
routes of Anthropic's Messages API (`/v1/messages...`), whose clients read
Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, with
the field named in the message. `APIError.response(path)` picks the shape.
This module owns:

- `APIError` and its subclasses, raised anywhere in request handling;
- `api_error_from_validation(errors)`, the ONE translation of pydantic
  errors into a 400 whose `param` is the failing field path
  (`messages.0.role`), shared by FastAPI's body validation and by routes
  that validate by hand;
- handlers for FastAPI's `RequestValidationError` (including malformed JSON
  and a non-JSON content type), Starlette's `HTTPException` (unknown routes,
  wrong methods) and a last-resort handler that answers 500 with a generic
  message -- the traceback goes to the server log, never to the client.

`install_error_handlers(app)` registers them all.

Not for: deciding *which* error a condition is (routes and the engine do
that) or validation rules (server/protocol).

Validators that check a sub-field from an enclosing model put the sub-path in
the pydantic error context as `field` (see `server.protocol.common.field_error`);
`api_error_from_validation` appends it, so a rule written at the message level
still reports `messages.3.tool_call_id` rather than `messages.3`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

logger = logging.getLogger("anchorage.errors")


class APIError(Exception):
    """An error with an HTTP status, answered in OpenAI's shape (`body`) or, on the Messages API's routes,
    in Anthropic's (`anthropic_body`)."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str,
        param: str | None = None,
        code: str | int | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        error.update(self.extra)
        return {"error": error}

    def anthropic_body(self) -> dict[str, Any]:
        """The error as Anthropic's API shapes it (`/v1/messages`): its type in Anthropic's words, and the
        field it names in the message, since that shape has no `param`."""
        message = self.message
        if self.type == "exceed_context_size_error":
            # Anthropic's wording, which clients (coding agents among them) look for to compact and retry.
            # It starts the message, so no field name goes before it.
            message = (f"prompt is too long: {self.extra['n_prompt_tokens']} tokens > {self.extra['n_ctx']} "
                       f"maximum ({message})")
        elif self.param and self.param not in message:
            message = f"{self.param}: {message}"
        kind = "request_too_large" if self.status == 413 else _ANTHROPIC_TYPES.get(self.type) or (
            "api_error" if self.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def response(self, path: str = "") -> JSONResponse:
        """The error answered on `path`: Anthropic-shaped on the Messages API's routes, else OpenAI's."""
        anthropic = is_anthropic_path(path)
        body = self.anthropic_body() if anthropic else self.body()
        status = self.status
        if anthropic and self.type == "not_supported_error":
            # Anthropic's API has no 501: a request for what the server cannot do is its 400, and the
            # Anthropic SDK retries every 5xx as a server fault.
            status = 400
        return JSONResponse(body, status_code=status, headers=self.headers or None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.message!r}, param={self.param!r})"


def is_anthropic_path(path: str) -> bool:
    """A route of Anthropic's Messages API (server/routes/messages.py), whose clients read its error shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


# Our error types that Anthropic names otherwise; the rest map by status (api_error from 500 up).
_ANTHROPIC_TYPES = {"invalid_request_error": "invalid_request_error", "authentication_error": "authentication_error",
                    "not_found_error": "not_found_error", "exceed_context_size_error": "invalid_request_error",
                    "not_supported_error": "invalid_request_error"}


class InvalidRequestError(APIError):
    def __init__(self, message: str, param: str | None = None, code: str | None = None, **kw: Any):
        super().__init__(400, message, "invalid_request_error", param, code, **kw)


class AuthenticationError(APIError):
    def __init__(self, message: str = "invalid or missing API key", **kw: Any):
        # RFC 9110: a 401 names the scheme the client should use.
        kw.setdefault("headers", {"WWW-Authenticate": "Bearer"})
        super().__init__(401, message, "authentication_error", **kw)


class NotFoundError(APIError):
    def __init__(self, message: str, param: str | None = None, **kw: Any):
        super().__init__(404, message, "not_found_error", param, **kw)


class ConflictError(APIError):
    def __init__(self, message: str, param: str | None = None, **kw: Any):
        super().__init__(409, message, "conflict_error", param, **kw)


class NotSupportedError(APIError):
    def __init__(self, message: str, param: str | None = None, **kw: Any):
        super().__init__(501, message, "not_supported_error", param, **kw)


class UnavailableError(APIError):
    def __init__(self, message: str = "the server is not ready", **kw: Any):
        super().__init__(503, message, "unavailable_error", **kw)


class ServerError(APIError):
    def __init__(self, message: str = "internal server error", **kw: Any):
        super().__init__(500, message, "server_error", **kw)


class ExceedContextSizeError(APIError):
    """llama.cpp's `exceed_context_size_error`, with OpenAI's code.

    The message also says "maximum context length" because client libraries
    (LangChain, the agents SDKs) detect context overflow by that phrase or by
    `code == "context_length_exceeded"`.
    """

    def __init__(self, n_prompt_tokens: int, n_ctx: int, message: str | None = None,
                 param: str | None = "messages"):
        message = message or (
            f"the request exceeds the available context size: {n_prompt_tokens} tokens "
            f"requested, but this model's maximum context length is {n_ctx} tokens"
        )
        super().__init__(
            400,
            message,
            "exceed_context_size_error",
            param=param,
            code="context_length_exceeded",
            extra={"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx},
        )


# Helpers named after the kinds, for call sites that read better as functions.
invalid_request = InvalidRequestError
authentication = AuthenticationError
not_found = NotFoundError
conflict = ConflictError
not_supported = NotSupportedError
unavailable = UnavailableError
exceed_context_size = ExceedContextSizeError


_TYPE_FOR_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


def _type_for_status(status: int) -> str:
    if status in _TYPE_FOR_STATUS:
        return _TYPE_FOR_STATUS[status]
    return "server_error" if status >= 500 else "invalid_request_error"


_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


def field_path(loc: Iterable[str | int]) -> str:
    """`("body", "messages", 0, "role")` -> `messages.0.role`.

    FastAPI prefixes where a value came from; the client knows that already.
    """
    parts = [str(p) for p in loc]
    if parts and (parts[0] == "body" or (parts[0] in _LOCATIONS and len(parts) > 1)):
        parts = parts[1:]
    # pydantic names the union member that failed (`tool_choice.literal['auto','none','required']`,
    # `function-after[...]`, or a bare `str` for `str | list[...]`); the client's field is the path without
    # it. Field names hold no brackets, and none of this server's is a type's name.
    return ".".join(p for p in parts if "[" not in p and p not in _UNION_MEMBERS)


_UNION_MEMBERS = frozenset({"str", "int", "float", "bool"})


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    """(param path, human message) for one pydantic error dict."""
    loc = tuple(error.get("loc", ()))
    ctx = error.get("ctx") or {}
    sub = ctx.get("field") if isinstance(ctx, Mapping) else None
    if sub:
        loc = loc + tuple(str(sub).split("."))
    path = field_path(loc)
    kind = error.get("type", "")
    msg = str(error.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        # OpenAI's own wording for an unknown argument.
        return path, f"Unrecognized request argument supplied: {path}"
    if kind == "missing":
        return path, f"{path}: this field is required" if path else "a required field is missing"
    # Custom errors raised by our validators ("value_error" wraps ValueError
    # messages as "Value error, ..."; drop that prefix) already say what is wrong.
    if kind == "value_error" and msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    # Our own validators' messages start with the field they are about.
    if not path or msg.startswith(path):
        return path, msg
    return path, f"{path}: {msg}"


def api_error_from_validation(errors: list[Mapping[str, Any]]) -> APIError:
    """The 400 for a list of pydantic error dicts (the first one decides)."""
    if not errors:
        return InvalidRequestError("invalid request")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "json_invalid":
        ctx = first.get("ctx") or {}
        where = f" at position {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        detail = ctx.get("error", "malformed JSON")
        return InvalidRequestError(f"could not parse JSON body{where}: {detail}", code="json_invalid")
    if field_path(loc) == "" and kind == "missing":
        return InvalidRequestError("the request needs a JSON body", code="missing_body")
    if field_path(loc) == "" and kind in ("model_attributes_type", "model_type", "dict_type"):
        return InvalidRequestError("the request body must be a JSON object")
    path, message = _describe(first)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    ctx = first.get("ctx")
    code = ctx.get("code") if isinstance(ctx, Mapping) else None  # a validator's (`field_error(code=...)`)
    return InvalidRequestError(message, param=path or None, code=code)


def _is_raw_body_error(error: Mapping[str, Any]) -> bool:
    # FastAPI leaves the body as bytes when the content type is not JSON, and
    # the model then fails at loc ("body",) with the bytes as input.
    return field_path(error.get("loc", ())) == "" and isinstance(error.get("input"), bytes | bytearray)


async def _api_error_handler(request: Request, exc: APIError) -> JSONResponse:
    return exc.response(request.url.path)


async def _validation_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if errors and _is_raw_body_error(errors[0]):
        got = request.headers.get("content-type") or "none"
        return APIError(
            415,
            f"the request body must be JSON sent with Content-Type: application/json (got {got})",
            "invalid_request_error",
            code="unsupported_media_type",
        ).response(request.url.path)
    return api_error_from_validation(errors).response(request.url.path)


def json_body_problem(raw: bytes) -> str:
    """Why Python's JSON parser refuses `raw` for a reason other than its syntax, in a few words."""
    try:
        json.loads(raw)
    except UnicodeDecodeError as exc:
        return f"it is not UTF-8 (byte {exc.start} is {raw[exc.start:exc.start + 1]!r})"
    except RecursionError:
        return "it nests too deeply"
    except json.JSONDecodeError as exc:
        return f"{exc.msg} (line {exc.lineno} column {exc.colno})"
    except ValueError as exc:  # past what the parser takes: an integer of more than 4300 digits
        return f"it holds a number the parser refuses ({str(exc).split(';')[0]})"
    return "the parser refused it"


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    """Every method some route of this path takes (RFC 9110's Allow): Starlette names only the first
    route it matched, and GET and DELETE /v1/responses/{id} are two routes. Asked of each route as a
    request of each method would be, since FastAPI keeps an included router's routes behind one route."""
    allowed = [method for method in _METHODS
               if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                      for route in getattr(request.app, "routes", ()))]
    return ", ".join(allowed)


async def _http_exception_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    status = exc.status_code
    code = {404: "not_found", 405: "method_not_allowed"}.get(status)
    if status == 404 and exc.detail == "Not Found":
        message = f"no route for {request.method} {request.url.path}"
    elif status == 405 and exc.detail == "Method Not Allowed":
        allowed = _allowed_methods(request) or (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        message = f"method {request.method} is not allowed on {request.url.path}"
        if allowed:
            message += f" (allowed: {allowed})"
            exc.headers = {**(exc.headers or {}), "Allow": allowed}
    elif status == 400 and exc.detail == "There was an error parsing the body":
        # FastAPI's answer when the JSON parser raised something other than a syntax error; which one, its
        # own parse of the (cached) body says.
        message = "could not parse the JSON body: " + json_body_problem(await request.body())
        code = "json_invalid"
    else:
        message = str(exc.detail)
    return APIError(
        status, message, _type_for_status(status), code=code, headers=exc.headers
    ).response(request.url.path)


async def _client_gone_handler(request: Request, exc: ClientDisconnect) -> JSONResponse:
    # The client hung up before its body arrived: nothing failed on our side and no one reads the answer.
    # Handled here, not by _unexpected_handler (which logs a traceback as a server error).
    logger.info("client disconnected before its body arrived: %s %s", request.method, request.url.path)
    return InvalidRequestError("the client disconnected before the request body arrived").response(request.url.path)


async def _unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    # The client learns only that it was our fault; the details stay here.
    logger.error(
        "unhandled error on %s %s", request.method, request.url.path, exc_info=exc
    )
    return ServerError("internal server error; the server log has the details").response(request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    """Register every handler above on `app`."""
    app.add_exception_handler(APIError, _api_error_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_handler)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_exception_handler)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _client_gone_handler)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected_handler)
