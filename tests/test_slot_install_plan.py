"""What a restore installs of a windowed slot file: all the window it holds, or, short of room, the end's.

The next turn of a conversation may rejoin before the saved end (an agent's at
its turn's first tool call), and reusing m tokens needs the windowed layers
from m - window + 1 on. So a restore installs every windowed position the file
holds; only when the pool cannot take them does it keep what continuing at the
very end reads (the last window and a page).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from slots.slot_install import RestoreError, plan_install, reserve

PAGE, WINDOW = 16, 32
GROUPS = ["full", "window", "window"]


@dataclass
class Header:
    positions: int
    window_from: int

    def first_held_of(self, layer: int) -> int:
        return 0 if GROUPS[layer] == "full" else self.window_from


class Allocator:
    """`window_room` free window pages and `pinned` more that other slots' pins could give up; any full pages."""
    page = PAGE

    def __init__(self, window_room: int, pinned: int = 0):
        self.window_room, self.pinned = window_room, pinned
        self.taken: dict[str, int] = {}
        self.pins_released = 0

    def can_allocate(self, needs: dict[str, int]) -> bool:
        return needs.get("window", 0) <= self.window_room

    def release_holds_for(self, needs: dict[str, int]) -> int | None:
        want = needs.get("window", 0)
        if want <= self.window_room:
            return 0
        if want > self.window_room + self.pinned:
            return None
        self.pins_released += 1
        self.window_room += self.pinned
        return 1

    def allocate_pages(self, group: str, count: int) -> list[int]:
        self.taken[group] = count
        return list(range(count))


def test_a_restore_installs_every_windowed_position_the_file_holds():
    plan = plan_install(Header(160, window_from=96), list(range(170)), GROUPS, PAGE, WINDOW)
    assert (plan.win_start, plan.needs) == (96, {"full": 10, "window": 4})
    reserve(plan, Allocator(window_room=4))
    assert plan.positions_of(1) == (96, 160) and plan.window_pages[:6] == [None] * 6


def test_short_of_room_a_restore_keeps_the_window_the_end_reads():
    plan = plan_install(Header(160, window_from=96), list(range(170)), GROUPS, PAGE, WINDOW)
    allocator = Allocator(window_room=3)
    reserve(plan, allocator)
    assert plan.win_start == 112 and allocator.taken["window"] == 3  # from 160 - 32 - 16, page aligned


def test_a_restore_gives_up_the_older_window_rather_than_another_slots_pin():
    plan = plan_install(Header(160, window_from=96), list(range(170)), GROUPS, PAGE, WINDOW)
    allocator = Allocator(window_room=3, pinned=2)
    reserve(plan, allocator)
    assert plan.win_start == 112 and allocator.pins_released == 0


def test_a_pool_without_room_even_for_the_ends_window_refuses():
    plan = plan_install(Header(160, window_from=96), list(range(170)), GROUPS, PAGE, WINDOW)
    with pytest.raises(RestoreError, match="no room"):
        reserve(plan, Allocator(window_room=2))


@pytest.mark.parametrize("page, words", [(24, "page size (24)"), (64, "page size (64)")])
def test_a_file_whose_window_starts_past_what_this_page_size_reuses_is_refused_naming_the_page_size(page, words):
    # Saved at page 16 with the window from 128: at page 24, 144 tokens need it from 96 (113 rounded down);
    # at page 64, the 128 installed tokens hold none of it.
    with pytest.raises(RestoreError) as caught:
        plan_install(Header(160, window_from=128), list(range(170)), GROUPS, page, WINDOW)
    assert words in str(caught.value) and "saved at" in str(caught.value)
