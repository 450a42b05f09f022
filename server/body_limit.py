"""A cap on the size of a request body, answered with an OpenAI-shaped 413.

What it is for: without it one client can make the server buffer a body of
any size (FastAPI reads the whole body before validating it), and a few
large uploads take the memory every other request needs. The cap is
`--max-request-body-bytes`; a body over it gets a 413 that names the flag,
never a 500 and never an out-of-memory kill.

Why it is shaped so: a pure-ASGI middleware, like the gate in app.py, so
streamed responses and disconnect notices pass through untouched. A declared
`Content-Length` over the cap is refused before a byte is read; a chunked
body (no length) is read up to the cap and refused as soon as it passes it.
A body within the cap is handed to the app as it was received, and later
`receive` calls (a streaming route waiting for a disconnect) go straight to
the server.
"""

from __future__ import annotations

from server.errors import APIError


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than --max-request-body-bytes ({limit} bytes)",
                    "invalid_request_error", code="request_too_large")


def _declared_length(scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server itself rejects a malformed length
    return None


class BodyLimitMiddleware:
    """Refuse request bodies over `limit` bytes with a 413."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _declared_length(scope)
        if declared is not None and declared > self.limit:
            return await _too_large(self.limit).response()(scope, receive, send)
        if declared is not None:
            # The HTTP server stops at the declared length, which is within the cap.
            return await self.app(scope, receive, send)
        received: list[dict] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before the body ended
                received.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                return await _too_large(self.limit).response()(scope, receive, send)
            received.append(message)
            if not message.get("more_body", False):
                break

        async def replay():
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)
