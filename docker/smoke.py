"""HTTP smoke checks the CI docker check runs against a live container.

What it is for: proving, from outside the container, that the image serves:
`/health` answers 200, and one OpenAI-shaped chat completion comes back with
an assistant message. Each sub-command is one check, exits 0 or 1, and prints
one line saying what it saw, so check.sh can count passes and failures.

What it is not: a protocol test suite. The route-level behaviour is tested
by pytest against the app in-process; this only shows the packaged server
answers through a real port. Standard library only, so it runs with any
python3 on the host, before or without the project's venv.

Usage: python3 docker/smoke.py health|chat BASE_URL
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 120.0  # a first completion on a cold CPU model may compile kernels


def _request(url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def check_health(base: str) -> tuple[bool, str]:
    status, body = _request(f"{base}/health")
    return status == 200, f"GET /health -> {status} {body[:200]!r}"


def _served_model_id(base: str) -> str:
    """The id the server advertises; clients send it back as `model`."""
    status, body = _request(f"{base}/v1/models")
    if status == 200:
        data = json.loads(body).get("data") or []
        if data and isinstance(data[0], dict) and data[0].get("id"):
            return str(data[0]["id"])
    return "default"


def check_chat(base: str) -> tuple[bool, str]:
    model = _served_model_id(base)
    status, body = _request(
        f"{base}/v1/chat/completions",
        {
            "model": model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "temperature": 0,
        },
    )
    if status != 200:
        return False, f"POST /v1/chat/completions -> {status} {body[:300]!r}"
    reply = json.loads(body)
    choices = reply.get("choices") or []
    message = choices[0].get("message") if choices else None
    usage = reply.get("usage") or {}
    # The tiny checkpoint's words may decode to nothing printable, so the
    # evidence that the model ran is the token count, not the text.
    ok = (
        reply.get("object") == "chat.completion"
        and isinstance(message, dict)
        and message.get("role") == "assistant"
        and choices[0].get("finish_reason") in {"stop", "length", "tool_calls"}
        and isinstance(usage.get("completion_tokens"), int)
        and usage["completion_tokens"] >= 1
    )
    return ok, (
        f"POST /v1/chat/completions (model {model!r}) -> {status}, "
        f"finish_reason={choices[0].get('finish_reason') if choices else None!r}, "
        f"completion_tokens={usage.get('completion_tokens')!r}, "
        f"content={(message or {}).get('content')!r:.80}"
    )


def main(argv: list[str]) -> int:
    checks = {"health": check_health, "chat": check_chat}
    if len(argv) != 3 or argv[1] not in checks:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        ok, detail = checks[argv[1]](argv[2].rstrip("/"))
    except (OSError, ValueError) as err:  # refused, timed out, not JSON
        ok, detail = False, f"{argv[1]}: {type(err).__name__}: {err}"
    print(detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
