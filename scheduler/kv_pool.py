"""Page bookkeeping for the paged KV pool: which page is free, owned or cached.

The pool is split into groups that are sized and released independently:
"full" pages back the full-attention layers (kept for the whole sequence) and
"window" pages back the sliding-window layers (released as the window slides).
A model with only one kind of layer has only that group. Page ids index the
runner's tensors of that group; this module never sees a tensor.

Every page has a reference count. Holders are running sequences and the
prefix cache (which holds one reference per page it caches). A page is

- free:   no references, on the free list;
- cached: its only reference is the prefix cache's (evictable);
- owned:  referenced by at least one sequence.

`check_integrity()` asserts free + owned + cached == total and that no page is
on the free list twice or both free and referenced; tests call it after every
operation. Allocation is paired: callers ask `can_allocate` (counting what the
prefix cache could give back) before `allocate`, so an allocation never fails
half-way.
"""

from __future__ import annotations

from dataclasses import dataclass


class PoolExhausted(Exception):
    """Raised by allocate() when asked for more than is free: a caller bug."""


class PageGroup:
    def __init__(self, name: str, num_pages: int):
        if num_pages < 1:
            raise ValueError(f"page group {name!r} needs at least one page")
        self.name = name
        self.num_pages = num_pages
        self._refs = [0] * num_pages
        # Pop from the end; reversed so page 0 is handed out first (readable tests).
        self._free = list(range(num_pages - 1, -1, -1))
        self._cached: set[int] = set()

    # -- queries ---------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        """Pages whose only holder is the prefix cache (evictable)."""
        # /metrics reads this from the event loop while the engine thread adds and drops cached pages:
        # tuple() copies the set in one step under the GIL, where iterating it could meet a change in size.
        return sum(1 for p in tuple(self._cached) if self._refs[p] == 1)

    @property
    def num_owned(self) -> int:
        return self.num_pages - self.num_free - self.num_cached

    def refs(self, page: int) -> int:
        return self._refs[page]

    def is_cached(self, page: int) -> bool:
        return page in self._cached

    def only_cache_holds(self, page: int) -> bool:
        return page in self._cached and self._refs[page] == 1

    # -- sequence references -----------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise PoolExhausted(f"{self.name}: asked for {n} pages, {len(self._free)} free")
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            self._refs[p] = 1
        return pages

    def incref(self, page: int) -> None:
        if self._refs[page] <= 0:
            raise ValueError(f"{self.name}: incref of free page {page}")
        self._refs[page] += 1

    def decref(self, page: int) -> None:
        if self._refs[page] <= 0:
            raise ValueError(f"{self.name}: decref of free page {page}")
        if self._refs[page] == 1 and page in self._cached:
            # Only cache_release may drop the cache's reference: a sequence's
            # double free would otherwise recycle a page a cached node serves.
            raise ValueError(f"{self.name}: decref would drop the cache's reference to page {page}")
        self._refs[page] -= 1
        if self._refs[page] == 0:
            self._free.append(page)

    # -- the prefix cache's reference -------------------------------------------
    def cache_hold(self, page: int) -> None:
        if page in self._cached:
            raise ValueError(f"{self.name}: page {page} cached twice")
        self.incref(page)
        self._cached.add(page)

    def cache_release(self, page: int) -> None:
        if page not in self._cached:
            raise ValueError(f"{self.name}: page {page} is not cached")
        self._cached.discard(page)
        self.decref(page)

    def check_integrity(self) -> None:
        free = self._free
        assert len(free) == len(set(free)), f"{self.name}: a page is on the free list twice"
        for p in free:
            assert self._refs[p] == 0, f"{self.name}: free page {p} has {self._refs[p]} refs"
            assert p not in self._cached, f"{self.name}: free page {p} is marked cached"
        referenced = sum(1 for r in self._refs if r > 0)
        assert all(r >= 0 for r in self._refs), f"{self.name}: negative refcount"
        assert len(free) + referenced == self.num_pages, f"{self.name}: a page is neither free nor referenced"
        for p in self._cached:
            assert self._refs[p] >= 1, f"{self.name}: cached page {p} has no reference"
        assert self.num_free + self.num_owned + self.num_cached == self.num_pages


@dataclass(frozen=True)
class PoolUsage:
    group: str
    total: int
    free: int
    owned: int
    cached: int


class KVPool:
    """The groups of one model's pool, by name ("full", "window")."""

    def __init__(self, page_size: int, num_pages: dict[str, int]):
        if page_size < 1:
            raise ValueError("page_size must be positive")
        self.page_size = page_size
        self.groups = {name: PageGroup(name, n) for name, n in num_pages.items()}

    def group(self, name: str) -> PageGroup | None:
        return self.groups.get(name)

    def usage(self) -> list[PoolUsage]:
        return [PoolUsage(g.name, g.num_pages, g.num_free, g.num_owned, g.num_cached) for g in self.groups.values()]

    def check_integrity(self) -> None:
        for g in self.groups.values():
            g.check_integrity()
