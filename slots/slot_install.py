"""Where a restored slot's KV goes in the pool: plan, reserve, publish or abandon.

A restore streams the file's KV into pages while the engine keeps stepping
(`slots.slot_io.restore_file`), so installing is split in three:

1. `plan_install` (any thread, pure): from the header and the tokens, which
   positions each layer gets and how many pages of each group that takes --
   and the refusals a file's geometry calls for, before anything is taken;
2. `reserve` (engine thread): make the room (other slots' pins give way, as
   they do to a request) and take fresh pages. Nothing else can read or free
   them -- they are in no page table and not in the prefix cache -- so the
   restoring thread may write them while the engine runs other sequences;
3. `publish` (engine thread) puts the written pages in the prefix cache, or
   `abandon` gives them back when the file turned out bad.

Bookkeeping only: no torch, no file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slots.fslot_layout import SlotHeader


class RestoreError(Exception):
    """A verified file that still cannot be installed (no room, bad geometry)."""


@dataclass
class InstallPlan:
    tokens: list[int]  # the page-aligned tokens installed
    win_start: int  # first position the windowed layers get (a multiple of the page)
    needs: dict[str, int]  # pages per group
    groups: list[str]  # each layer's pool group, "full" or "window"
    least_start: int = 0  # the latest win_start a continuation at the end still reads from
    full_pages: list[int] = field(default_factory=list)  # set by reserve
    window_pages: list[int | None] = field(default_factory=list)  # None below win_start

    def cut_window(self, page: int) -> None:
        """Install the windowed layers only from `least_start` (what continuing at the end reads)."""
        if "window" in self.needs:
            self.win_start = self.least_start
            self.needs["window"] = (len(self.tokens) - self.win_start) // page

    def positions_of(self, layer: int) -> tuple[int, int]:
        """The positions [lo, hi) of `layer` that go into the pool."""
        return (0 if self.groups[layer] == "full" else self.win_start), len(self.tokens)

    def table_of(self, layer: int) -> list[int | None]:
        return self.full_pages if self.groups[layer] == "full" else self.window_pages


def plan_install(header: SlotHeader, tokens: list[int], groups: list[str], page: int,
                 window: int | None) -> InstallPlan:
    """What to install of a file with this header and these tokens, or RestoreError saying why not."""
    n = (min(len(tokens), header.positions) // page) * page
    if n == 0:
        raise RestoreError(f"slot file holds {len(tokens)} tokens, fewer than one page ({page}); nothing to restore")
    for index, group in enumerate(groups):
        # Every later request reads a full-attention layer from position 0: rows missing there would be
        # whatever the fresh pages last held (a crafted file can say so; the digest does not stop it).
        if group == "full" and header.first_held_of(index):
            raise RestoreError(f"the file's layer {index} holds positions from {header.first_held_of(index)} on, "
                               "and it is a full-attention layer here, which must hold every position from 0")
    # The window layers' KV we install: all of the live suffix the file holds, page aligned -- the next
    # turn may rejoin well before the end (at an anchor), as it would have on the saving server. When the
    # pool has no room for that, `reserve` cuts it to what continuing at the end reads (the last window
    # plus a page).
    win_start = least_start = 0
    if "window" in groups:
        held_from = max(header.first_held_of(i) for i, g in enumerate(groups) if g == "window")
        reads_from = max(0, n - (window or n) - page)
        win_start = -(-held_from // page) * page
        least_start = max(win_start, (reads_from // page) * page)
        if least_start >= n:
            raise RestoreError(f"the file's windowed layers hold positions from {held_from}, none inside the {n} "
                               f"tokens a restore at this server's page size ({page}) installs: restore it into a "
                               "server with the page size it was saved at")
        # A later prompt reuses the first m tokens (m a multiple of this page size, at most n) only with its
        # windowed layers' KV from the page holding m - window + 1 on; for m = n that must be installed, or
        # the restore would report tokens that nothing can reuse. A file saved at another page size can hold
        # its window from a position no page here starts at, and then misses the start of one.
        if window and win_start > max(0, n - window + 1) // page * page:
            raise RestoreError(f"the file's windowed layers hold positions from {held_from}, and continuing its {n} "
                               f"tokens at this server's page size ({page}) needs them from "
                               f"{max(0, n - window + 1) // page * page}: restore it into a server with the page "
                               "size it was saved at")
    needs = {}
    if "full" in groups:
        needs["full"] = n // page
    if "window" in groups:
        needs["window"] = (n - win_start) // page
    return InstallPlan(tokens[:n], win_start, needs, list(groups), least_start)


def reserve(plan: InstallPlan, allocator) -> None:
    """Take the plan's pages (engine thread), or RestoreError when the pool has no room for them."""
    # Other slots' pins give way to a restore as they do to a request (oldest first, and only if that
    # makes the room); what running requests hold does not.
    if not allocator.can_allocate(plan.needs):
        # The window before the last one is worth installing, never worth another slot's pin: short of free
        # (or evictable) room for all of it, only what continuing at the end reads.
        plan.cut_window(allocator.page)
    if allocator.release_holds_for(plan.needs) is None:
        raise RestoreError(f"no room in the KV pool for {len(plan.tokens)} restored tokens beside what running "
                           "requests hold; raise --kv-cache-tokens (or --swa-pool-tokens) or retry when they finish")
    try:
        if "full" in plan.needs:
            plan.full_pages = allocator.allocate_pages("full", plan.needs["full"])
        if "window" in plan.needs:
            below = [None] * (plan.win_start // allocator.page)
            plan.window_pages = below + allocator.allocate_pages("window", plan.needs["window"])
    except BaseException:
        abandon(plan, allocator)
        raise


def publish(plan: InstallPlan, allocator) -> list[int]:
    """Put the written pages in the prefix cache (engine thread); returns the tokens now cached."""
    try:
        allocator.cache.insert(plan.tokens, plan.full_pages, plan.window_pages)
    finally:
        abandon(plan, allocator)  # the cache took its own references (or kept older equal pages)
    return plan.tokens


def abandon(plan: InstallPlan, allocator) -> None:
    """Give the plan's pages back (engine thread): ours were only for the copy."""
    allocator.unreference(plan)  # the plan's full_pages and window_pages, as a hold's
    plan.full_pages, plan.window_pages = [], []
