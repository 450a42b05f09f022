"""What a request body may be: at most `--max-request-body-bytes`, and not compressed.

What it is for: without it one client can make the server buffer a body of
any size (FastAPI reads the whole body before validating it), and a few
large uploads take the memory every other request needs. The cap is
`--max-request-body-bytes`; a body over it gets a 413 that names the flag,
never a 500 and never an out-of-memory kill.

A body sent with a `Content-Encoding` (gzip, br, ...) is a 415 naming the
header: the server does not decompress, and read as JSON such a body only
failed with a parse error that did not say why.

Why it is shaped so: a pure-ASGI middleware, like the gate in app.py, so
streamed responses and disconnect notices pass through untouched. A declared
`Content-Length` over the cap is refused before a byte is read; any other
body is read up to the cap and refused as soon as it passes it.
A body within the cap is handed to the app as it was received, and later
`receive` calls (a streaming route waiting for a disconnect) go straight to
the server. The bytes received are counted even when a length was declared:
a request may also say `Transfer-Encoding: chunked`, and then the chunks, not
the declared length, frame the body.
"""

from __future__ import annotations

from server.errors import APIError


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than --max-request-body-bytes ({limit} bytes)",
                    "invalid_request_error", code="request_too_large")


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return value
    return None


def _declared_length(scope) -> int | None:
    try:
        return int(_header(scope, b"content-length"))
    except (TypeError, ValueError):
        return None  # none declared (chunked); the HTTP server itself rejects a malformed length


def _encoded(scope) -> str | None:
    """The body's Content-Encoding, when it is one the server would have to undo."""
    raw = _header(scope, b"content-encoding")
    value = raw.decode("latin-1").strip() if raw is not None else ""
    return value if value and value.lower() != "identity" else None


class BodyLimitMiddleware:
    """Refuse request bodies over `limit` bytes with a 413."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        encoding = _encoded(scope)
        if encoding is not None:
            error = APIError(415, f"Content-Encoding {encoding[:40]!r} is not supported: send the JSON body "
                             "uncompressed", "invalid_request_error", param="Content-Encoding",
                             code="unsupported_content_encoding")
            return await error.response(scope["path"])(scope, receive, send)
        declared = _declared_length(scope)
        if declared is not None and declared > self.limit:
            return await _too_large(self.limit).response(scope["path"])(scope, receive, send)
        # The bytes are counted whatever was declared: with both Content-Length and Transfer-Encoding:
        # chunked, h11 frames the body by the chunks, and a small declared length would let any size in.
        received: list[dict] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before the body ended
                received.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                return await _too_large(self.limit).response(scope["path"])(scope, receive, send)
            received.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)
