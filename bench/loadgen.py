"""A small asyncio load generator (httpx) that times streamed content, not headers.

Every request is a streamed `/v1/completions` call. The clock starts just
before the request is sent; time to first token (TTFT) is the arrival of the
first server-sent event that carries generated content -- a non-empty `text`
or a token id list -- not the response headers (a server may flush headers
at once and compute for seconds after). Inter-token latency (ITL) is the gap
between consecutive content events. Token counts come from the server's
`usage` (or llama.cpp's `timings`) when it gives them, otherwise from the
number of content events, and the result says which.

Concurrency is "all at once": a workload of N requests opens N streams
together and the aggregate rate is the generated tokens over the wall time
from the first send to the last byte.

Not for: deciding what to send (bench.workloads builds the requests; a
peer's `payload()` shapes them for its dialect).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class StreamResult:
    start: float
    first: float | None = None  # first content event
    end: float | None = None
    event_times: list[float] = field(default_factory=list)  # content events
    events: int = 0
    completion_tokens: int | None = None  # from usage/timings
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prefix-cache hit, when the server says
    error: str | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.events

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def itls(self) -> list[float]:
        t = self.event_times
        return [b - a for a, b in zip(t, t[1:])]


def _content(choice: dict) -> tuple[str, list[int]]:
    text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    ids = choice.get("token_ids") or []
    return text, list(ids)


def _absorb_accounting(res: StreamResult, chunk: dict) -> None:
    usage = chunk.get("usage")
    if usage:
        res.completion_tokens = usage.get("completion_tokens", res.completion_tokens)
        res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            res.cached_tokens = details["cached_tokens"]
    timings = chunk.get("timings")
    if timings:  # llama.cpp: cache_n reused, prompt_n computed, predicted_n generated
        if timings.get("cache_n") is not None:
            res.cached_tokens = timings["cache_n"]
        if res.prompt_tokens is None and timings.get("prompt_n") is not None:
            res.prompt_tokens = timings["prompt_n"] + (timings.get("cache_n") or 0)
        if res.completion_tokens is None and timings.get("predicted_n") is not None:
            res.completion_tokens = timings["predicted_n"]


async def stream_completion(client: httpx.AsyncClient, url: str, payload: dict) -> StreamResult:
    res = StreamResult(start=time.perf_counter())
    try:
        async with client.stream("POST", url, json=payload) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")[:300]
                res.error = f"HTTP {resp.status_code}: {body}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(data)
                if "error" in chunk and not chunk.get("choices"):
                    res.error = str(chunk["error"])[:300]
                    break
                got = False
                for choice in chunk.get("choices") or []:
                    text, ids = _content(choice)
                    if text or ids:
                        got = True
                        res.text += text
                        res.token_ids += ids
                # llama.cpp's native /completion chunks
                if chunk.get("content") or chunk.get("tokens"):
                    got = True
                    res.text += chunk.get("content") or ""
                    res.token_ids += chunk.get("tokens") or []
                if got:
                    res.first = res.first or now
                    res.event_times.append(now)
                    res.events += 1
                _absorb_accounting(res, chunk)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.end = time.perf_counter()
    return res


async def run_concurrent(base_url: str, path: str, payloads: list[dict], timeout: float = 3600.0) -> tuple[list[StreamResult], float]:
    """Send every payload at once; returns the results and the wall time."""
    limits = httpx.Limits(max_connections=len(payloads) + 4, max_keepalive_connections=len(payloads) + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(stream_completion(client, path, p) for p in payloads))
        wall = time.perf_counter() - t0
    return list(results), wall


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    v = sorted(values)
    k = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


@dataclass
class LoadSummary:
    requests: int
    failed: int
    tokens: int
    wall_s: float
    tok_per_s: float
    ttft_p50: float
    ttft_p95: float
    itl_p50: float
    itl_p95: float
    counted_from_usage: bool


def summarize(results: list[StreamResult], wall: float) -> LoadSummary:
    ok = [r for r in results if r.error is None]
    tokens = sum(r.tokens for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [x for r in ok for x in r.itls]
    return LoadSummary(
        requests=len(results), failed=len(results) - len(ok), tokens=tokens, wall_s=wall,
        tok_per_s=tokens / wall if wall > 0 else math.nan,
        ttft_p50=percentile(ttfts, 50), ttft_p95=percentile(ttfts, 95),
        itl_p50=percentile(itls, 50), itl_p95=percentile(itls, 95),
        counted_from_usage=all(r.completion_tokens is not None for r in ok),
    )
