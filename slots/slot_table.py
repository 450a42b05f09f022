"""Logical slots (llama.cpp's `--parallel`): who is busy, what each one holds.

A slot is one logical conversation. It remembers the token sequence of its
last request and pins that sequence's KV: references on the pages the prefix
cache holds for it, so the prefix survives cache eviction until the slot is
reused or erased, or until a running request needs those pages (a pin gives
way, oldest first, rather than make a request wait: PageAllocator's holds).
That is what a slot save writes out and a restore puts back.

Slots do not limit concurrency -- `--max-num-seqs` does. A request names a
slot with `id_slot`; -1 or absent picks the idle slot sharing the longest
prefix with its prompt (then the least recently used), never one that a
request or action naming it is queued for. When every slot is busy (or
awaited) the request still runs, slot-less.

Threads: `acquire` runs on the HTTP event loop, everything that touches pages
(`on_end`, `pin`, `unpin`) on the engine thread; a lock guards the flags and a
condition lets admin actions wait (bounded) for a busy slot.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Slot:
    id: int
    busy: bool = False
    tokens: list[int] = field(default_factory=list)  # the pinned, page-aligned prefix
    hold: object = None  # scheduler.prefix_cache.Match of pinned pages
    last_used: float = 0.0
    id_task: int | None = None
    n_prompt_tokens: int = 0
    n_generated: int = 0
    next_token: int | None = None
    gave_way: int = 0  # tokens of the pin the pool took back for other work (0: it did not), until the next pin


class SlotTable:
    def __init__(self, n_slots: int, allocator, n_ctx: int):
        self.slots = [Slot(i) for i in range(n_slots)]
        self.alloc = allocator
        self.n_ctx = n_ctx
        self._cond = threading.Condition()
        self._task_ids = 0
        # Slots some request or admin action is queued for (server/slot_wait.py): a request naming no slot
        # does not take one of them when it falls idle, or a save queued behind a turn could find that
        # turn's KV replaced by a stranger's.
        self._awaited: set[int] = set()

    def set_awaited(self, slot_id: int, awaited: bool) -> None:
        with self._cond:
            (self._awaited.add if awaited else self._awaited.discard)(slot_id)

    # -- request side (event loop) -------------------------------------------------
    def acquire(self, id_slot: int | None, prompt_ids: list[int]) -> int | None:
        """Mark a slot busy for a request; None when the named slot is busy (the caller waits for it) or,
        with none named, when no slot is idle (the request runs slot-less)."""
        with self._cond:
            if id_slot is not None and id_slot >= 0:
                slot = self.slots[id_slot]  # range checked by the caller (404)
                if slot.busy:
                    return None
            else:
                idle = [s for s in self.slots if not s.busy and s.id not in self._awaited]
                if not idle:
                    return None
                slot = max(idle, key=lambda s: (_common_prefix(s.tokens, prompt_ids), -s.last_used))
            slot.busy = True
            self._task_ids += 1
            slot.id_task = self._task_ids
            slot.n_prompt_tokens = len(prompt_ids)
            return slot.id

    # -- engine thread ---------------------------------------------------------------
    def on_end(self, seq) -> None:
        """A sequence ended (finished, aborted or failed); its slot becomes idle."""
        if seq.slot_id is None or seq.index != 0:
            return
        slot = self.slots[seq.slot_id]
        if seq.finish_reason in ("stop", "length", "abort"):
            # A cancelled request's computed span went to the cache too (its pages are freed by now, so the
            # pin is of the path the cache holds): the slot holds that conversation, not the one before it.
            computed = seq.all_ids if seq.finish_reason == "abort" else seq.all_ids[: seq.num_tokens - 1]
            self.pin(slot, computed)
            slot.n_generated = len(seq.output_ids)
            slot.next_token = seq.output_ids[-1] if seq.output_ids else None
        with self._cond:
            slot.busy = False
            slot.last_used = time.monotonic()
            self._cond.notify_all()

    def pin(self, slot: Slot, tokens: list[int]) -> None:
        self.unpin(slot)
        held = self.alloc.hold_cached(tokens, on_release=lambda: self._released(slot, held))
        slot.hold = held
        slot.tokens = list(tokens[: held.tokens])

    def _released(self, slot: Slot, held) -> None:
        """The allocator gave this pin's pages to a running request: the slot holds nothing now."""
        if slot.hold is held:
            slot.gave_way = len(slot.tokens)
            slot.hold, slot.tokens = None, []

    def unpin(self, slot: Slot) -> int:
        n = len(slot.tokens)
        slot.gave_way = 0
        if slot.hold is not None:
            self.alloc.drop_hold(slot.hold)
        slot.hold, slot.tokens = None, []
        return n

    # -- admin side ------------------------------------------------------------------
    def try_claim(self, slot_id: int) -> Slot | None:
        """Mark the slot busy for an admin action if it is idle; None if it is not. Never waits: the
        routes wait on the event loop, so waiters hold no thread (a blocking wait per waiter filled the
        worker threads that the action holding the slot needed to write its file)."""
        with self._cond:
            slot = self.slots[slot_id]
            if slot.busy:
                return None
            slot.busy = True
            return slot

    def release(self, slot: Slot) -> None:
        with self._cond:
            slot.busy = False
            slot.last_used = time.monotonic()
            self._cond.notify_all()

    def describe(self) -> list[dict]:
        with self._cond:
            out = []
            for s in self.slots:
                d = {"id": s.id, "n_ctx": self.n_ctx, "is_processing": s.busy, "n_cached_tokens": len(s.tokens)}
                if s.id_task is not None:
                    # llama.cpp's shape: `next_token` is a list of one object (clients read next_token[0]).
                    d.update(id_task=s.id_task, n_prompt_tokens=s.n_prompt_tokens,
                             next_token=[{"has_next_token": s.busy, "n_decoded": s.n_generated,
                                          "last_token": s.next_token}])
                out.append(d)
            return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
