"""What the engine sends back for a request, and the stream it travels on.

The engine thread produces `StreamEvent`s; the consumer is usually an asyncio
route handler, sometimes a plain thread (benchmarks, tests). `RequestStream`
bridges both: when created inside a running event loop it delivers through
`loop.call_soon_threadsafe` into an asyncio.Queue, otherwise through a
thread-safe queue. Either way the engine thread never blocks on a consumer.
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
    rank: int | None = None  # 1 = the likeliest token there (prompt logprobs only)


@dataclass
class ChoiceStats:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    prompt_ms: float
    predicted_ms: float
    preemptions: int


@dataclass
class StreamEvent:
    index: int  # choice index
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_token: int | None = None  # the EOS / stop id that ended the choice, if any
    stats: ChoiceStats | None = None  # on the final event of a choice
    error: str | None = None
    # The prompt's tokens after its first, each scored by the tokens before it (prompt logprobs): on the
    # first event of a choice that asked for them, else None.
    prompt_logprobs: list[TokenLogprob] | None = None
    stop_string: str | None = None  # on the final event: the client's stop string that ended the choice, if one did
    # On a choice's first event: the prompt tokens the prefix cache held at its first admission (the count
    # never changes after it, and `stats` repeats it), so a stream's opening can already split its prompt.
    cached_tokens: int | None = None


_DONE = object()


class RequestStream:
    def __init__(self, request_id: str, n: int):
        self.request_id = request_id
        self.n = n
        self._open = n
        try:
            self._loop = asyncio.get_running_loop()
            self._aq: asyncio.Queue | None = asyncio.Queue()
            self._q = None
        except RuntimeError:
            self._loop, self._aq = None, None
            self._q = queue.SimpleQueue()

    # -- producer side (engine thread) -------------------------------------------
    def put(self, event: StreamEvent) -> None:
        items = [event]
        if event.finish_reason is not None:
            self._open -= 1
            if self._open == 0:
                items.append(_DONE)
        for item in items:
            if self._aq is not None:
                self._loop.call_soon_threadsafe(self._aq.put_nowait, item)
            else:
                self._q.put(item)

    # -- consumer side -------------------------------------------------------------
    def __aiter__(self):
        return self._aiter()

    async def _aiter(self):
        assert self._aq is not None, "stream was created outside an event loop; iterate it synchronously"
        while True:
            item = await self._aq.get()
            if item is _DONE:
                return
            yield item

    def __iter__(self):
        assert self._q is not None, "stream was created inside an event loop; iterate it with async for"
        while True:
            item = self._q.get()
            if item is _DONE:
                return
            yield item
