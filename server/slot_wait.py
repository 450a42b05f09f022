"""Waiting for a named slot, on the event loop: slot actions and requests with `id_slot` share it.

What it is for: an admin action (save, restore, erase) or a request that names
a slot (`id_slot`) while another holds it waits its turn, as llama.cpp defers
a task for a busy slot -- up to SLOT_WAIT_SECONDS, then a 409 naming `id_slot`.

Waiters are served first in, first out, as llama.cpp's deferred tasks are: a
save then an erase of a busy slot save first (when every waiter polled, either
could win, and the erase threw away what the save was queued to keep). Only
the head of a slot's queue tries to take it, and while a slot has waiters a
request naming no slot does not take it (SlotTable.set_awaited).

Why it polls the event loop: the slot table is shared with the engine thread
(a request's slot is freed there), so it is guarded by a thread lock, not an
asyncio one. A waiter that blocked a worker thread for its whole wait held
that thread; ten of them filled the default pool and stalled every slot
action. A short poll holds nothing. The queues live on the event loop alone,
so they take no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from server.errors import ConflictError, InvalidRequestError

T = TypeVar("T")

SLOT_WAIT_SECONDS = 30.0
SLOT_POLL_SECONDS = 0.01
CLIENT_CHECK_SECONDS = 0.25  # how often a waiter asks whether its client is still there


# Per slot table and slot id, the slot's waiters in arrival order (each a token object).
_queues: dict[tuple[int, int], deque[object]] = {}


async def wait_for_slot(try_take: Callable[[], T | None], slot_id: int, table: Any,
                        client_left: Callable[[], Awaitable[bool]] | None = None) -> T:
    """`try_take()`'s first non-None answer (it takes the slot when it is free), in turn with the others
    waiting for this slot, or a 409 after SLOT_WAIT_SECONDS. `table`: the SlotTable, told while the slot
    has waiters. `client_left` (a request's `is_disconnected`): a waiter whose client hung up leaves the
    queue -- Starlette does not cancel a route when its client goes, and the request would otherwise take
    the slot ahead of live waiters and run for nobody."""
    queue = _queues.setdefault((id(table), slot_id), deque())
    if not queue and (taken := try_take()) is not None:
        return taken
    me = object()
    queue.append(me)
    table.set_awaited(slot_id, True)
    now = time.monotonic()
    deadline, next_check = now + SLOT_WAIT_SECONDS, now + CLIENT_CHECK_SECONDS
    try:
        while queue[0] is not me or (taken := try_take()) is None:
            now = time.monotonic()
            if now >= deadline:
                raise ConflictError(f"slot {slot_id} is still processing a request after {SLOT_WAIT_SECONDS:.0f} s",
                                    param="id_slot")
            if client_left is not None and now >= next_check:
                next_check = now + CLIENT_CHECK_SECONDS
                if await client_left():
                    raise InvalidRequestError(f"the client disconnected while waiting for slot {slot_id}",
                                              param="id_slot")
            await asyncio.sleep(SLOT_POLL_SECONDS)
        return taken
    finally:  # taken, timed out or cancelled (the client left): the next in line goes on
        queue.remove(me)
        if not queue:
            table.set_awaited(slot_id, False)
