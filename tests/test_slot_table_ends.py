"""What a slot holds after its request ends: the conversation that request computed, however it ended.

A finished request pins its computed tokens. A cancelled one (the client hung
up) pins what its computed span left in the prefix cache -- the engine caches
it on abort, as llama.cpp keeps a cancelled slot's KV -- so `/slots` and a save
describe the conversation the slot last ran, never the one before it. A failed
request leaves the slot's pin as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slots.slot_table import SlotTable

PAGE = 16


@dataclass
class Held:
    tokens: int
    full_pages: list = field(default_factory=list)
    window_pages: list = field(default_factory=list)


class Allocator:
    """A prefix cache that holds the first `cached` tokens of any path (whole pages)."""

    def __init__(self, cached: int):
        self.cached = cached
        self.holds: list[Held] = []

    def hold_cached(self, tokens, on_release=None) -> Held:
        held = Held(min(len(tokens), self.cached) // PAGE * PAGE)
        self.holds.append(held)
        return held

    def drop_hold(self, held) -> None:
        self.holds.remove(held)


@dataclass
class Seq:
    all_ids: list[int]
    output_ids: list[int]
    finish_reason: str
    slot_id: int = 0
    index: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.all_ids)


def _table_after(first: Seq, second: Seq, cached: int) -> SlotTable:
    table = SlotTable(1, Allocator(cached), n_ctx=4096)
    for seq in (first, second):
        assert table.acquire(0, seq.all_ids[: len(seq.all_ids) - len(seq.output_ids)]) == 0
        table.on_end(seq)
    return table


P = Seq(list(range(100, 260)), list(range(240, 260)), "stop")


def test_a_cancelled_request_leaves_its_slot_holding_what_it_computed_not_the_conversation_before():
    q = Seq(list(range(500, 638)), list(range(620, 638)), "abort")
    table = _table_after(P, q, cached=128)
    slot = table.slots[0]
    assert slot.tokens == q.all_ids[:128] and not slot.busy
    described = table.describe()[0]
    assert (described["n_cached_tokens"], described["n_prompt_tokens"]) == (128, 120)
    assert described["next_token"][0]["n_decoded"] == 18  # llama.cpp's shape: a list of one
    assert len(table.alloc.holds) == 1, "the previous conversation's pin is dropped"


def test_a_failed_request_leaves_the_slots_pin_as_it_was():
    q = Seq(list(range(500, 638)), list(range(620, 638)), "error")
    table = _table_after(P, q, cached=4096)
    assert table.slots[0].tokens == P.all_ids[:144] and not table.slots[0].busy
