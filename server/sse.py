"""Server-sent events framing for streamed answers.

OpenAI's chat and completions streams are unnamed `data: {json}\n\n` events
ending in `data: [DONE]` (`event`, `DONE`); the Responses and Messages
streams name each event on an `event:` line as well, from the payload's
`type`, and end with no `[DONE]` (`named_event`). Every stream answers with
`HEADERS`: no cache may hold it, and no proxy may buffer it.
"""

from __future__ import annotations

import json
from typing import Any

DONE = "data: [DONE]\n\n"


def event(payload: Any) -> str:
    if hasattr(payload, "model_dump"):
        payload = payload.model_dump(mode="json")
    return "data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n\n"


HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def named_event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\n" + event(payload)
