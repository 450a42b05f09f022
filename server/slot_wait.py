"""Waiting for a named slot, on the event loop: slot actions and requests with `id_slot` share it.

What it is for: an admin action (save, restore, erase) or a request that names
a slot (`id_slot`) while another holds it waits its turn, as llama.cpp defers
a task for a busy slot -- up to SLOT_WAIT_SECONDS, then a 409 naming `id_slot`.

Why it polls the event loop: the slot table is shared with the engine thread
(a request's slot is freed there), so it is guarded by a thread lock, not an
asyncio one. A waiter that blocked a worker thread for its whole wait held
that thread; ten of them filled the default pool and stalled every slot
action. A short poll holds nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from server.errors import ConflictError

T = TypeVar("T")

SLOT_WAIT_SECONDS = 30.0
SLOT_POLL_SECONDS = 0.01


async def wait_for_slot(try_take: Callable[[], T | None], slot_id: int) -> T:
    """`try_take()`'s first non-None answer (it takes the slot when it is free), or a 409 after
    SLOT_WAIT_SECONDS."""
    deadline = time.monotonic() + SLOT_WAIT_SECONDS
    while (taken := try_take()) is None:
        if time.monotonic() >= deadline:
            raise ConflictError(f"slot {slot_id} is still processing a request after {SLOT_WAIT_SECONDS:.0f} s",
                                param="id_slot")
        await asyncio.sleep(SLOT_POLL_SECONDS)
    return taken
