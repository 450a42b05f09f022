"""A real anchorage server on a free local port, for tests that speak HTTP.

What it is for: `live_server(model_dir, **settings)` is a context manager that
builds `server.app.create_app(ServeSettings(...), background_load=False)`,
runs it under uvicorn in a background thread on a socket it bound itself
(port 0, so two servers never race for a port), waits until `/health` says
200, and yields a `LiveServer` with the base URL. Leaving the block asks
uvicorn to exit, which runs the app's lifespan shutdown (the engine stops),
and joins the thread.

What it is not for: unit tests of routes (those can use an in-process client)
or anything that needs the CLI's argument parsing (`anchorage serve`).

Why so: the acceptance tests of the HTTP API use the official `openai` SDK
and raw HTTP against a listening socket, so streaming, disconnects and the
ASGI middleware all run for real. Tests keep one server per module (a
module-scoped fixture around this helper) because loading a model, even a
tiny one, costs more than most requests. Defaults are small and float32 so a
tiny checkpoint starts in about a second.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from server.app import create_app
from server.settings import ServeSettings

START_TIMEOUT_S = 60.0
# Small pools: a tiny checkpoint needs little, and the tests share 2 cores. The
# behaviour-changing settings are spelled out so an ANCHORAGE_* variable in the
# environment (constructor values win over it) cannot change what a test sees.
DEFAULTS: dict[str, Any] = {
    "dtype": "float32", "max_model_len": 512, "kv_cache_tokens": 4096, "parallel": 2,
    "api_key": None, "admin_api_key": None, "served_model_name": None, "slot_save_path": None,
    "reasoning_budget": -1, "reasoning_budget_message": None, "anchors": True,
}


@dataclass
class LiveServer:
    base_url: str  # http://127.0.0.1:PORT, no trailing slash
    app: Any  # the FastAPI app, for tests that read server state (e.g. the tokenizer)
    _tokens: dict[str, list[int]] = field(default_factory=dict, repr=False)  # /tokenize answers, per text

    @property
    def v1(self) -> str:
        """The base URL the openai SDK wants."""
        return self.base_url + "/v1"

    @property
    def state(self):
        return self.app.state.server

    def tokenize(self, text: str, headers: dict[str, str] | None = None) -> list[int]:
        """Token ids of `text` as the server tokenizes it (control tokens parsed), via /tokenize.

        Remembered per text: a server's tokenizer never changes, and tests ask often.
        """
        if text not in self._tokens:
            r = httpx.post(self.base_url + "/tokenize", json={"content": text}, headers=headers, timeout=30)
            r.raise_for_status()
            self._tokens[text] = r.json()["tokens"]
        return list(self._tokens[text])

    def token_id(self, text: str, headers: dict[str, str] | None = None) -> int:
        """The one token id `text` encodes to; fails loudly if it is several."""
        ids = self.tokenize(text, headers)
        if len(ids) != 1:
            raise AssertionError(f"{text!r} is {len(ids)} tokens ({ids}), not one")
        return ids[0]


class _ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # signals belong to the main thread (pytest)
        pass


@contextmanager
def live_server(model_dir: Path | None, **settings: Any) -> Iterator[LiveServer]:
    """Serve `model_dir` with ServeSettings(**DEFAULTS | settings); yield a LiveServer."""
    values = {**DEFAULTS, **settings}
    if model_dir is not None:
        values["model"] = Path(model_dir)
    app = create_app(ServeSettings(**values), background_load=False)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, lifespan="on")
    server = _ThreadedServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, server, thread)
        yield LiveServer(base, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"the server on port {port} did not shut down within 30 s")


def _wait_healthy(base: str, server: uvicorn.Server, thread: threading.Thread) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        if not thread.is_alive():
            raise RuntimeError(f"the server thread exited during start-up (last /health: {last})")
        if server.started:
            try:
                r = httpx.get(base + "/health", timeout=2.0)
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
                if "failed to load" in r.text:
                    raise RuntimeError(f"the model failed to load: {r.text}")
            except httpx.TransportError as exc:
                last = repr(exc)
        time.sleep(0.05)
    raise RuntimeError(f"the server did not become healthy within {START_TIMEOUT_S} s (last /health: {last})")
