"""Pages for sequences: grow, share from the cache, release, hand back.

The pool (kv_pool.py) counts references; the prefix cache (prefix_cache.py)
holds computed spans; this module moves pages between them and a sequence's
page tables, and is the only place that does. Allocation evicts from the
prefix cache when the free list is short -- window pressure first turns cached
spans into tombstones, full pressure removes cached leaves -- so cached state
is soft and never blocks a running sequence.

Holds (`hold_cached`, a slot's pin) are soft too: references that keep a
cached span from eviction, but which give way, oldest first
(`release_holds_for`), when a sequence or a restore needs the pages and
releasing them makes the room -- otherwise idle slots could pin the pool and a
request would wait for room nothing frees.

Page tables: `full_pages[i]` backs positions `[i*page, (i+1)*page)` of the
full-attention layers; `window_pages[i]` the same span of the windowed layers,
or None once released (by a slide) or never needed (a cache hit far behind
the window).
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.kv_pool import KVPool
from scheduler.prefix_cache import Match, PrefixCache
from scheduler.sequence import Sequence


class PageAllocator:
    def __init__(self, pool: KVPool, cache: PrefixCache):
        self.pool, self.cache = pool, cache
        self.page = pool.page_size
        self.full = pool.group("full")
        self.win = pool.group("window")
        # Live holds by id, oldest first (dicts keep insertion order), each with what to call when
        # pressure releases it. A hold is in here exactly while its references are taken.
        self._holds: dict[int, tuple[Match, Callable[[], None] | None]] = {}
        self.holds_released = 0  # holds given up so that something else fitted (a metric)

    # -- sizing --------------------------------------------------------------------
    def needs(self, seq: Sequence, new_end: int) -> dict[str, int]:
        """New pages `seq` needs so its tables cover positions [0, new_end)."""
        n_pages = -(-new_end // self.page)
        out = {}
        if self.full is not None:
            out["full"] = max(0, n_pages - len(seq.full_pages))
        if self.win is not None:
            out["window"] = max(0, n_pages - len(seq.window_pages))
        return out

    def can_allocate(self, needs: dict[str, int], evict: bool = True) -> bool:
        """Whether `needs` fits: in free pages and, with `evict`, pages the prefix cache can give up."""
        for group, n in needs.items():
            g = self.pool.groups[group]
            if n > g.num_free and (not evict or n > g.num_free + self.cache.reclaimable(group)):
                return False
        return True

    def _make_room(self, group: str, n: int) -> None:
        g = self.pool.groups[group]
        short = n - g.num_free
        if short <= 0:
            return
        if group == "window":
            self.cache.evict_windows(short)
            short = n - g.num_free
        if short > 0:
            self.cache.evict_nodes(short)

    def allocate_pages(self, group: str, n: int) -> list[int]:
        """n fresh pages of one group, evicting cached ones if needed (callers checked can_allocate)."""
        self._make_room(group, n)
        return self.pool.groups[group].allocate(n)

    def allocate(self, seq: Sequence, new_end: int) -> None:
        """Extend the tables to cover [0, new_end). Callers checked can_allocate."""
        needs = self.needs(seq, new_end)
        for group, n in needs.items():
            if n:
                self._make_room(group, n)
        if needs.get("full"):
            seq.full_pages.extend(self.full.allocate(needs["full"]))
        if needs.get("window"):
            seq.window_pages.extend(self.win.allocate(needs["window"]))

    # -- the prefix cache ------------------------------------------------------------
    def adopt(self, seq: Sequence, match: Match) -> None:
        """Start `seq` from a cached prefix: take references on the pages it reads."""
        assert not seq.full_pages and not seq.window_pages and seq.num_computed == 0
        for p in match.full_pages:
            self.full.incref(p)
        for p in match.window_pages:
            if p is not None:
                self.win.incref(p)
        seq.full_pages = list(match.full_pages)
        seq.window_pages = list(match.window_pages)
        seq.num_computed = match.tokens
        # No lock on the adopted prefix: dropping our reference as the window
        # slides past leaves the page with the cache (refcounted), and holding
        # it for the whole run would pin one window more than the pool floor.
        seq.locked_prefix = 0
        # Positions before the first live window page were never ours to hold.
        live = [i for i, p in enumerate(seq.window_pages) if p is not None]
        seq.released = (live[0] * self.page) if live else match.tokens if self.win else 0

    def cache_prefix(self, seq: Sequence, upto: int) -> int:
        """Put the full pages of seq.all_ids[:upto] into the prefix cache.

        Where the cache already held a span (another sequence computed it
        first), `seq` switches to the cache's page and lets its duplicate go:
        same tokens, same KV. Kept, the duplicate would stay pinned for the
        rest of the run, and so would the cached original, an ancestor of
        the nodes `seq` just added.
        """
        n = (upto // self.page) * self.page
        if n == 0:
            return 0
        tokens = seq.all_ids[:n]
        created = self.cache.insert(tokens, seq.full_pages, seq.window_pages)
        cached = self.cache.path_pages(tokens, whole_window=True)
        for i, p in enumerate(cached.full_pages):
            if p != seq.full_pages[i]:
                self.full.incref(p)
                self.full.decref(seq.full_pages[i])
                seq.full_pages[i] = p
        for i, p in enumerate(cached.window_pages):
            mine = seq.window_pages[i] if i < len(seq.window_pages) else None
            if p is not None and mine is not None and p != mine:
                self.win.incref(p)
                self.win.decref(mine)
                seq.window_pages[i] = p
        return created

    def hold_cached(self, tokens: list[int], on_release: Callable[[], None] | None = None) -> Match:
        """Take references on every cached page on the path of `tokens` (a slot's pin).

        The hold lasts until `drop_hold`, or until a sequence needs the pages (`release_holds_for`),
        which then calls `on_release` so the holder knows it holds nothing any more.
        """
        held = self.cache.path_pages(tokens)
        self.reference(held)
        if held.full_pages or any(p is not None for p in held.window_pages):
            self._holds[id(held)] = (held, on_release)  # a hold of nothing has nothing to give way
        return held

    def drop_hold(self, held: Match) -> None:
        """Give a hold's references back; a hold already released under pressure has none left."""
        if self._holds.pop(id(held), None) is not None:
            self.unreference(held)

    def release_holds_for(self, needs: dict[str, int]) -> int | None:
        """Release the oldest holds until `needs` can be allocated; how many went (0: it fitted already),
        or None -- and nothing released -- when even releasing every hold would not make room.

        Called before a sequence is preempted or left waiting, and before a restore refuses: a pin is a
        cache of an idle conversation, and live work comes first; but a pin is never given up for
        nothing, only when that makes the room.
        """
        if self.can_allocate(needs):
            return 0
        holds = self.live_holds()
        # Would it be enough? Asked of can_allocate itself, with the holds' references taken off for a
        # moment: a held page stays a cache node (the cache evicts only pages it alone holds), so this
        # round trip changes nothing.
        for held in holds:
            self.unreference(held)
        enough = self.can_allocate(needs)
        for held in holds:
            self.reference(held)
        if not enough:
            return None
        released = 0
        while not self.can_allocate(needs):
            held, on_release = self._holds.pop(next(iter(self._holds)))
            self.unreference(held)
            released += 1
            if on_release is not None:
                on_release()
        self.holds_released += released
        return released

    def live_holds(self) -> list[Match]:
        """The holds whose references are taken, oldest first."""
        return [held for held, _ in self._holds.values()]

    def reference(self, held: Match) -> None:
        """References on every page of `held` that never give way (a hold's do): a save reading the pages
        from another thread keeps them from being freed and rewritten under it until `unreference`."""
        for p in held.full_pages:
            self.full.incref(p)
        for p in held.window_pages:
            if p is not None:
                self.win.incref(p)

    def unreference(self, held: Match) -> None:
        """Give back one reference on every page of `held` (anything with `full_pages` and `window_pages`)."""
        for p in held.full_pages:
            self.full.decref(p)
        for p in held.window_pages:
            if p is not None:
                self.win.decref(p)

    # -- giving back -------------------------------------------------------------------
    def release_window(self, seq: Sequence, free_from: int, free_to: int) -> int:
        """Drop our window pages for [free_from, free_to) (page aligned); returns pages freed."""
        if self.win is None or free_to <= free_from:
            return 0
        released = 0
        for i in range(free_from // self.page, min(free_to // self.page, len(seq.window_pages))):
            p = seq.window_pages[i]
            if p is not None:
                self.win.decref(p)
                seq.window_pages[i] = None
                released += 1
        seq.released = max(seq.released, free_to)
        return released

    def free(self, seq: Sequence) -> None:
        """Drop every reference `seq` holds (finish, abort, preemption)."""
        for p in seq.full_pages:
            self.full.decref(p)
        for p in seq.window_pages:
            if p is not None:
                self.win.decref(p)
        seq.full_pages, seq.window_pages = [], []
        seq.num_computed = 0
        seq.released = 0
        seq.locked_prefix = 0
