"""How long a server's event loop stalls behind one request with a tool schema of megabytes.

What it is for: checking the tool parameters against their meta-schema takes
seconds for a schema of megabytes; done while the body is parsed, on the event
loop, it held every other request (even `/health`) that long. This sends one
chat request offering a tool whose parameters are `--mib` MiB of JSON schema,
polls `GET /health` every 20 ms while it is in flight, and prints the worst
and median /health latency next to the same polling with no such request.
The request's own fate (a 400 for its context, a 200) does not matter: only
whether other requests were answered while it was read.

Usage (a server already running, e.g. `.venv/bin/anchorage serve --port 8014`):

    .venv/bin/python -m bench.event_loop_stall --base-url http://127.0.0.1:8014 --mib 1.5

Not for: throughput or latency of generation (bench/run.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx


def big_tool(mib: float) -> dict:
    """A tool whose parameters are about `mib` MiB of valid JSON schema: many described, enumerated properties."""
    properties: dict[str, dict] = {}
    size, i = 0, 0
    while size < mib * 2**20:
        prop = {"type": "string", "description": f"field {i} " + "lorem ipsum " * 8,
                "enum": [f"value_{i}_{k}" for k in range(8)]}
        properties[f"p{i}"] = prop
        size += len(json.dumps(prop)) + 8
        i += 1
    return {"type": "function", "function": {"name": "configure", "description": "A large configuration tool.",
                                             "parameters": {"type": "object", "properties": properties}}}


async def _poll(client: httpx.AsyncClient, until: asyncio.Event) -> list[float]:
    waits: list[float] = []
    while not until.is_set():
        start = time.perf_counter()
        await client.get("/health")
        waits.append(time.perf_counter() - start)
        await asyncio.sleep(0.02)
    return waits


async def measure(base_url: str, mib: float, quiet_seconds: float = 2.0) -> dict:
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [big_tool(mib)], "max_tokens": 1}
    payload = json.dumps(body).encode()
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        quiet = asyncio.Event()
        poller = asyncio.create_task(_poll(client, quiet))
        await asyncio.sleep(quiet_seconds)
        quiet.set()
        idle = await poller
        done = asyncio.Event()
        poller = asyncio.create_task(_poll(client, done))
        start = time.perf_counter()
        answer = await client.post("/v1/chat/completions", content=payload,
                                   headers={"content-type": "application/json"})
        seconds = time.perf_counter() - start
        done.set()
        busy = await poller
    return {"body_mib": round(len(payload) / 2**20, 2), "request_status": answer.status_code,
            "request_seconds": round(seconds, 2),
            "health_idle": {"max": round(max(idle), 3), "median": round(statistics.median(idle), 3)},
            "health_during": {"max": round(max(busy), 3), "median": round(statistics.median(busy), 3),
                              "polls": len(busy)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the server's root, e.g. http://127.0.0.1:8014")
    ap.add_argument("--mib", type=float, default=1.5, help="size of the tool's parameters schema")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(measure(args.base_url.rstrip("/"), args.mib)), indent=2))


if __name__ == "__main__":
    main()
