"""Start a peer's HTTP server on loopback, wait until it answers, stop it.

Each server runs in its own process group (so stopping it ends its workers
too, and nothing else), logs to the work folder's logs/, listens on a free port on
127.0.0.1, and counts as up when its health URL answers 200. Stopping sends
SIGTERM to the group, then SIGKILL after a grace period.

Not for: what a peer's command line is (bench.peers).
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

from bench.venvs import LOGS, PeerUnavailable
from server.child_process import wait_until_healthy


def _tail(log: Path, n: int = 12) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""


@contextmanager
def running(name: str, argv: list[str], port: int, health: str = "/health", env: dict | None = None,
            startup_timeout: float = 900.0):
    """Run `argv` until the block ends; yields the base URL."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"server-{name}.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})
    try:
        why = wait_until_healthy(proc, base + health, startup_timeout, poll_s=1.0)
        if why:
            tail = f":\n{_tail(log)}" if proc.poll() is not None else ""
            raise PeerUnavailable(f"{name} server {why}; log {log}{tail}")
        yield base
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
