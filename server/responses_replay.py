"""The events of a streamed background turn, kept so that a client can read them again.

What it is for: a Responses turn sent with both `background` and `stream`
runs on a task of its own, not on the connection that asked for it. Its
events go into an `EventLog`; the POST's response follows the log as events
come, and `GET /v1/responses/{id}?stream=true&starting_after=N` follows it
from after event N -- OpenAI's way back into a stream whose connection
dropped. A reader that leaves stops reading; the turn runs on.

Why it is shaped so:
- Event i of the log is the event whose `sequence_number` is i (the writer
  numbers every event, from 0, and every event it numbers is logged), so
  `starting_after` is an index and a resumed reader gets exactly the events
  it had not seen, in order, with no gap and no repeat.
- Readers wait on an `asyncio.Event` that is replaced after each wake-up, so
  any number of readers follow one log, each at its own pace, and a reader
  never misses the close.
- The log holds the SSE text as sent: a resumed reader gets the same bytes
  the first reader got. It counts its bytes, so the response store charges a
  kept log against its budget like any other part of a stored turn.
- It lives on the event loop (only routes and their tasks touch it), so it
  takes no lock.

Not for: writing the events (server/output/responses_events.py) or the
turn's lifecycle (server/routes/responses.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class EventLog:
    def __init__(self) -> None:
        self.events: list[str] = []  # SSE text; invariant: events[i] carries sequence_number i
        self.closed = False  # the turn has said its last word: no event will be added
        self.size = 0  # characters held, for the response store's budget
        self._changed = asyncio.Event()

    def append(self, sse: str) -> None:
        assert not self.closed, "an event after the log was closed"
        self.events.append(sse)
        self.size += len(sse)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self, after: int = -1) -> AsyncIterator[str]:
        """The events whose sequence number is above `after`: those already logged, then each as it
        comes, until the log is closed."""
        i = max(after + 1, 0)
        while True:
            changed = self._changed  # taken before looking, so nothing added after the look is missed
            while i < len(self.events):
                yield self.events[i]
                i += 1
            if self.closed:
                return
            await changed.wait()
