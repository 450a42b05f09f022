"""`anchorage serve` as a child process, for scripts and tests that need the real CLI.

What it is for: `serve_child(args)` starts `python -m server.cli serve ARGS
--port P` on a free loopback port, waits until `/health` answers 200, yields
the base URL (no trailing slash), and on leaving sends SIGTERM, then SIGKILL
if the server has not exited within the grace period. It raises, naming the
reason, if the process exits or the deadline passes before it is healthy --
a caller never talks to a server that is not up.

What it is not for: in-process servers for HTTP tests (tests/live_server.py
runs uvicorn in a thread, faster and with access to app state), or peers of
the benchmark (bench/servers.py, which logs to files and reports a peer that
cannot run instead of raising).

Why it is shaped so: the demo evaluation and the cross-process slot tests
both need a separate process (a fresh process is the point of restoring a
slot; the evaluation measures what `anchorage serve` serves), and both had
grown their own copy of this start-and-wait loop.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


class ServerDidNotStart(RuntimeError):
    """The child exited, or was not healthy by the deadline; the message says which, with its stderr tail."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log, lines: int = 20) -> str:
    log.seek(0)
    return "\n".join(log.read().decode(errors="replace").strip().splitlines()[-lines:])


def wait_until_healthy(proc: subprocess.Popen, url: str, timeout_s: float, poll_s: float = 0.2) -> str | None:
    """None once `url` answers 200; otherwise why not: the process exited, or the deadline passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            return f"exited with code {proc.returncode} during start-up"
        try:
            if httpx.get(url, timeout=5.0).status_code == 200:
                return None
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            return f"did not answer {url} within {timeout_s:.0f}s"
        time.sleep(poll_s)


@contextmanager
def serve_child(args: list[str], start_timeout_s: float = 120.0, stop_grace_s: float = 30.0) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port), *args]
    # stderr to a file, not a pipe: a pipe nobody drains fills up and stalls a chatty server.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        why = wait_until_healthy(proc, base + "/health", start_timeout_s)
        if why:
            raise ServerDidNotStart(f"`{' '.join(cmd[1:])}` {why}:\n{_tail(log)}")
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(stop_grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
