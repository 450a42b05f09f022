"""API keys: `Authorization: Bearer KEY` or `X-Api-Key: KEY`, compared in constant time.

With `--api-key`, every route needs the key except `/health`, `/v1/health`
and `/v1/models` (llama.cpp's public pair and its /v1 twin, so load balancers
and model pickers work without it). Slot admin actions need `--admin-api-key` when one is set, else the API
key. Without keys the server is open, as llama.cpp's is.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from server.errors import AuthenticationError

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/v1/models"})


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key else None


def key_matches(presented: str | None, expected: str) -> bool:
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def check_api_key(request: Request, expected: str | None) -> None:
    if expected is None or request.url.path in PUBLIC_PATHS:
        return
    if not key_matches(presented_key(request), expected):
        raise AuthenticationError("invalid or missing API key: send Authorization: Bearer <key> or X-Api-Key")


def check_admin_key(request: Request, admin: str | None, api: str | None) -> None:
    expected = admin or api
    if expected is None:
        return
    if not key_matches(presented_key(request), expected):
        which = "--admin-api-key" if admin else "--api-key"
        raise AuthenticationError(f"slot actions need the admin key ({which}): invalid or missing key")
