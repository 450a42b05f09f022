"""Responses turns that run in the background (`background: true`), with or without a stream.

A background turn runs on a task of its own, not on the connection that
asked for it: the POST answers at once (`queued`), and the client polls
`GET /v1/responses/{id}`, cancels with `POST .../cancel`, or -- with `stream`
too -- follows its events, which go into the turn's `EventLog`
(server/responses_replay.py) so that `GET ...?stream=true&starting_after=N`
can resume them. `state.background` holds each running turn (`Running`):
what cancels it, and what GET answers if the store's bound evicted it
meanwhile.

Why it is shaped so: the route owns how a turn is read and answered (its
whole answer, its events); this module owns only the task around it, so it
is handed them as a coroutine and an async generator and imports no route.
A turn leaves the queue (`in_progress`) on its first token, not when it is
submitted, so a turn waiting behind others says `queued` as OpenAI's does.
Whatever ends the task -- the turn's end, a fault, the server shutting down
-- the log ends with the turn's last word as stored, so a reader never waits
on a log that will not grow and never hears another end than GET answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from fastapi.responses import StreamingResponse

from server import sse
from server.errors import APIError, InvalidRequestError, NotSupportedError
from server.protocol.responses import ResponsesRequest
from server.responses_replay import EventLog
from server.routes.responses_turn import Turn

log = logging.getLogger("anchorage.responses")
RECHARGE_EVERY = 64  # events: a streamed background turn is stored again this often, so the store's budget counts its log
# The events a turn's stream ends with, as SSE text begins.
_LAST_EVENTS = tuple(f"event: {kind}\n" for kind in ("response.completed", "response.incomplete", "response.cancelled",
                                                      "response.failed", "error"))


@dataclass
class Running:
    """A background turn while it runs (state.background)."""
    task: asyncio.Task
    request_id: str
    turn: Turn


def check_background(state, req: ResponsesRequest) -> None:
    """A background turn is read back from the store (its stream, too, when it streams)."""
    if not req.background:
        return
    if not req.store:
        raise InvalidRequestError("background mode needs store: true (a background response is read back with "
                                  "GET /v1/responses/{id})", param="background")
    if not state.responses.enabled:
        raise NotSupportedError("background mode needs the response store, and this server runs with it off "
                                "(--responses-store-size 0)", param="background")


class NobodyLeaves:
    """The client of a background turn: it never hangs up (the turn runs until it ends or is cancelled)."""

    async def is_disconnected(self) -> bool:
        return False


class _MarksRunning:
    """A request's event stream that calls `first()` when its first token comes: the turn left the queue. (An
    abort or a failure while it waits brings an event with no token: it never ran.)"""

    def __init__(self, stream, first) -> None:
        self.request_id, self._stream, self._first = stream.request_id, stream, first

    async def __aiter__(self):
        first = self._first
        async for ev in self._stream:
            if first is not None and ev.token_ids:
                first()
                first = None
            yield ev


def start_background(state, turn: Turn, stream, run_whole: Callable[[object, object], Awaitable[dict]]) -> dict:
    """Store the turn `queued`, answer that, and run `run_whole(client, stream)` -- the turn read whole -- on a
    task of its own."""
    snapshot = turn.begin("queued")
    marked = _MarksRunning(stream, lambda: turn.begin("in_progress"))

    async def run() -> None:
        try:
            await run_whole(NobodyLeaves(), marked)
        except BaseException as exc:  # noqa: BLE001 -- stored as failed (or cancelled); nobody else hears it
            turn.abandoned(exc)
            if not isinstance(exc, APIError | asyncio.CancelledError):
                log.exception("background response %s failed", turn.rid)
        finally:
            state.engine.abort(stream.request_id)  # a no-op once finished
            state.background.pop(turn.rid, None)

    state.background[turn.rid] = Running(asyncio.get_running_loop().create_task(run()), stream.request_id, turn)
    return snapshot


def start_background_stream(state, turn: Turn, request_id: str, events: AsyncIterator[str]) -> StreamingResponse:
    """Run the turn's event stream (`events`, SSE text that stores the turn as it goes) on a task of its own,
    into the turn's log, and answer with the log followed from its start: a client that hangs up stops
    reading, not the turn (it resumes with GET ?stream=true)."""
    kept = turn.log = EventLog()

    async def run() -> None:
        why = "the server stopped this response before it ended"  # the task cancelled (the loop closing)
        try:
            async for event in events:
                kept.append(event)
                if len(kept.events) % RECHARGE_EVERY == 0:
                    turn.recharge()
        except Exception:  # a fault of ours, stored as failed by the events' generator
            log.exception("background response %s failed", turn.rid)
            why = "internal error while answering; see server log"
        finally:
            await events.aclose()  # a no-op once it ended; else (the task cancelled) it stores the turn's end
            if not kept.events or not kept.events[-1].startswith(_LAST_EVENTS):
                kept.append(sse.named_event(_last_word(turn, len(kept.events), why)))
            kept.close()
            state.background.pop(turn.rid, None)

    state.background[turn.rid] = Running(asyncio.get_running_loop().create_task(run()), request_id, turn)
    return StreamingResponse(kept.follow(), media_type="text/event-stream", headers=sse.HEADERS)


def _last_word(turn: Turn, sequence: int, why: str) -> dict:
    """The event a log cut short ends with, numbered where it enters the log (a fault may have left the
    writer's count ahead of what was logged): the turn's end as stored, cancelled when the task was (the
    server shutting down), else an error."""
    if turn.latest is not None and turn.latest["status"] == "cancelled":
        return {"type": "response.cancelled", "sequence_number": sequence, "response": turn.latest}
    return {"type": "error", "sequence_number": sequence, "code": "server_error", "message": why, "param": None}
