"""Waiting for a named slot is first in, first out, and a slot with waiters is not given away."""

from __future__ import annotations

import asyncio

import pytest

from server.errors import ConflictError, InvalidRequestError
from server.slot_wait import wait_for_slot
from slots.slot_table import SlotTable


def _busy_table() -> SlotTable:
    table = SlotTable(2, allocator=None, n_ctx=64)
    assert table.acquire(0, [1, 2, 3]) == 0  # a turn holds slot 0
    return table


def test_actions_queued_for_a_busy_slot_take_it_in_the_order_they_came():
    table = _busy_table()
    order: list[str] = []

    async def action(name: str) -> None:
        slot = await wait_for_slot(lambda: table.try_claim(0), 0, table)
        order.append(name)
        await asyncio.sleep(0.02)  # the action's work, the slot held
        table.release(slot)

    async def scene() -> None:
        waiters = []
        for name in ("save", "erase", "restore"):
            waiters.append(asyncio.create_task(action(name)))
            await asyncio.sleep(0.005)
        table.release(table.slots[0])  # the turn ends
        await asyncio.gather(*waiters)

    for _ in range(5):  # polling in a race, the later ones won about half the time
        order.clear()
        table = _busy_table()
        asyncio.run(scene())
        assert order == ["save", "erase", "restore"]


def test_a_request_naming_no_slot_does_not_take_one_an_action_is_queued_for():
    table = _busy_table()

    async def scene() -> int | None:
        waiter = asyncio.create_task(wait_for_slot(lambda: table.try_claim(0), 0, table))
        await asyncio.sleep(0.005)
        table.release(table.slots[0])
        assert table.acquire(None, [1, 2, 3]) == 1  # the other idle slot, not the awaited one
        assert table.acquire(None, [1, 2, 3]) is None  # then slot-less, still not slot 0
        slot = await waiter
        table.release(slot)
        return table.acquire(None, [1, 2, 3])

    assert asyncio.run(scene()) == 0  # no one waits any more: slot 0 is anyone's again


def test_a_waiter_that_gives_up_lets_the_next_one_in(monkeypatch):
    import server.slot_wait as slot_wait

    monkeypatch.setattr(slot_wait, "SLOT_WAIT_SECONDS", 0.05)
    table = _busy_table()

    async def scene() -> None:
        first = asyncio.create_task(wait_for_slot(lambda: table.try_claim(0), 0, table))
        await asyncio.sleep(0.005)
        monkeypatch.setattr(slot_wait, "SLOT_WAIT_SECONDS", 5.0)
        second = asyncio.create_task(wait_for_slot(lambda: table.try_claim(0), 0, table))
        with pytest.raises(ConflictError):
            await first
        table.release(table.slots[0])
        assert (await second) is table.slots[0]

    asyncio.run(scene())


def test_a_waiter_whose_client_hung_up_leaves_the_queue_and_never_takes_the_slot():
    table = _busy_table()
    taken: list[str] = []

    async def request(name: str, gone: asyncio.Event) -> None:
        async def client_left() -> bool:
            return gone.is_set()
        slot = await wait_for_slot(lambda: table.try_claim(0), 0, table, client_left)
        taken.append(name)
        table.release(slot)

    async def scene() -> None:
        left, live = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(request("hung up", left))
        await asyncio.sleep(0.005)
        second = asyncio.create_task(request("live", live))
        await asyncio.sleep(0.005)
        left.set()  # the first client hangs up while the turn still holds the slot
        with pytest.raises(InvalidRequestError, match="disconnected while waiting for slot 0"):
            await first
        table.release(table.slots[0])  # the turn ends
        await second

    asyncio.run(scene())
    assert taken == ["live"]
