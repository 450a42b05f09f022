"""Prefix cache: a radix tree over full pages of tokens, sharing computed KV.

Each node is one page of `page_size` tokens under its parent, and holds the
pool pages that store that span's KV: a full-group page (full-attention
layers) and a window-group page (windowed layers). The cache keeps one
reference on each page it holds (see kv_pool.py), so a page a cached node
points at stays valid until the node lets go of it.

Tombstones. A node whose window page is gone (released by a window slide, or
evicted under pressure) is a tombstone: its full-group KV is still there, its
windowed-layer KV is not. Windowed layers only look back `window` tokens, so a
prefix ending at position m is usable iff the window pages covering
`[m - window + 1, m)` are live -- the tombstones before that are never read
again. `match` picks the deepest such point.

Eviction is two-tier and LRU: window pressure turns the least recently used
unreferenced nodes into tombstones (their full KV survives); full pressure
removes least recently used unreferenced leaves. Retained state is therefore
soft: nothing the cache holds can block a running request.

Not here: which sequence owns what (the scheduler), tensors (the runner).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import count

from scheduler.kv_pool import KVPool


@dataclass(eq=False)
class Node:
    key: tuple[int, ...]
    parent: "Node | None"
    full_page: int | None
    window_page: int | None
    depth: int  # pages from the root, this one included
    last_used: int = 0
    # This span's window page was live when its turn finished only because the turn's anchor capped the
    # slide (a plain slide had released it): reuse that reads it is reuse the anchor made.
    anchor_kept: bool = False
    children: dict[tuple[int, ...], "Node"] = field(default_factory=dict)


@dataclass
class Match:
    """A usable cached prefix: `tokens` tokens, with the pages that hold them."""

    tokens: int
    full_pages: list[int]
    window_pages: list[int | None]  # None where a tombstone or outside the window
    through_anchor: bool = False  # the prefix reads window KV that only a previous turn's anchor kept


class PrefixCache:
    def __init__(self, pool: KVPool, window: int | None):
        if pool.group("window") is not None and not window:
            raise ValueError("a pool with a window group needs the model's sliding window")
        self.pool = pool
        self.page = pool.page_size
        self.window = window if pool.group("window") else None
        self.full = pool.group("full")
        self.win = pool.group("window")
        self.root = Node((), None, None, None, 0)
        self._clock = count(1)
        self.num_nodes = 0

    # -- lookup ----------------------------------------------------------------
    def _walk(self, tokens: list[int], max_pages: int) -> list[Node]:
        path, node, p = [], self.root, self.page
        for i in range(max_pages):
            child = node.children.get(tuple(tokens[i * p:(i + 1) * p]))
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def _window_live(self, path: list[Node], k: int) -> bool:
        """Is a prefix of k pages usable: are the window pages it still needs live?"""
        if self.win is None or k == 0:
            return True
        first_key = max(0, k * self.page - self.window + 1)
        return all(path[i].window_page is not None for i in range(first_key // self.page, k))

    def match(self, tokens: list[int], max_tokens: int) -> Match:
        """Deepest usable cached prefix of `tokens`, at most `max_tokens` long.

        The window pages returned are only those a continuation still reads
        (the last `window` tokens); earlier ones come back as None.
        """
        path = self._walk(tokens, max_tokens // self.page)
        k = len(path)
        while k > 0 and not self._window_live(path, k):
            k -= 1
        now = next(self._clock)
        for n in path[:k]:
            n.last_used = now
        full = [n.full_page for n in path[:k]] if self.full else []
        window: list[int | None] = []
        if self.win is not None:
            first_needed = max(0, k * self.page - self.window + 1) // self.page if k else 0
            window = [n.window_page if i >= first_needed else None for i, n in enumerate(path[:k])]
        # Reuse an anchor made: the window this prefix reads holds a page only the anchor kept live.
        through = any(path[i].anchor_kept for i in range(first_needed, k)) if self.win is not None and k else False
        return Match(k * self.page, full, window, through)

    def mark_anchor_kept(self, tokens: list[int], start: int, end: int) -> int:
        """Mark the cached spans of `tokens`' path in positions [start, end) whose window pages a turn's anchor
        kept (a plain slide had released them); returns how many were marked."""
        path = self._walk(tokens, end // self.page)
        marked = 0
        for node in path[start // self.page:]:
            if node.window_page is not None:
                node.anchor_kept = True
                marked += 1
        return marked

    def path_pages(self, tokens: list[int], whole_window: bool = False) -> Match:
        """The cached pages of the whole path of `tokens`.

        Full pages all along the path. Window pages only for the last
        `window` tokens, which is all a continuation reads (a slot's pin must
        not hold window state the pool floor does not pay for), unless
        `whole_window` asks for every live one.
        """
        path = self._walk(tokens, len(tokens) // self.page)
        now = next(self._clock)
        for n in path:
            n.last_used = now
        full = [n.full_page for n in path] if self.full else []
        window: list[int | None] = []
        if self.win is not None:
            first = 0 if whole_window or not path else max(0, len(path) * self.page - self.window + 1) // self.page
            window = [n.window_page if i >= first else None for i, n in enumerate(path)]
        return Match(len(path) * self.page, full, window)

    # -- insertion ---------------------------------------------------------------
    def insert(self, tokens: list[int], full_pages: list[int], window_pages: list[int | None]) -> int:
        """Cache the first len(tokens) // page pages. Returns the number of new nodes.

        An existing node keeps its pages, except that a tombstone adopts a live
        window page offered for the same span.
        """
        n_pages = len(tokens) // self.page
        node, created, now = self.root, 0, next(self._clock)
        for i in range(n_pages):
            key = tuple(tokens[i * self.page:(i + 1) * self.page])
            fp = full_pages[i] if self.full else None
            wp = window_pages[i] if self.win is not None and i < len(window_pages) else None
            child = node.children.get(key)
            if child is None:
                # A window-only model's early spans may hold no KV at all: the
                # node is then a pure tombstone that keeps the path to later
                # live spans; it costs no pages.
                child = Node(key, node, fp, wp, node.depth + 1)
                if fp is not None:
                    self.full.cache_hold(fp)
                if wp is not None:
                    self.win.cache_hold(wp)
                node.children[key] = child
                self.num_nodes += 1
                created += 1
            elif child.window_page is None and wp is not None:
                self.win.cache_hold(wp)
                child.window_page = wp
                child.anchor_kept = False
            child.last_used = now
            node = child
        return created

    # -- eviction ----------------------------------------------------------------
    def _nodes(self) -> list[Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def _unreferenced(self, n: Node) -> bool:
        full_ok = n.full_page is None or self.full.only_cache_holds(n.full_page)
        win_ok = n.window_page is None or self.win.only_cache_holds(n.window_page)
        return full_ok and win_ok

    def _remove(self, n: Node) -> None:
        assert not n.children
        if n.full_page is not None:
            self.full.cache_release(n.full_page)
        if n.window_page is not None:
            self.win.cache_release(n.window_page)
        del n.parent.children[n.key]
        self.num_nodes -= 1

    def evict_nodes(self, pages_wanted: int) -> int:
        """Remove LRU unreferenced leaves (a parent becomes a leaf in turn).

        Returns the number of full-group pages freed (window pages of removed
        nodes are freed too, as a side effect).
        """
        heap = [(n.last_used, id(n), n) for n in self._nodes() if not n.children and self._unreferenced(n)]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < pages_wanted:
            _, _, n = heapq.heappop(heap)
            parent = n.parent
            freed += n.full_page is not None
            self._remove(n)
            if parent is not self.root and not parent.children and self._unreferenced(parent):
                heapq.heappush(heap, (parent.last_used, id(parent), parent))
        return freed

    def evict_windows(self, pages_wanted: int) -> int:
        """Tombstone LRU nodes whose window page nobody else holds; returns pages freed."""
        if self.win is None:
            return 0
        candidates = [n for n in self._nodes() if n.window_page is not None and self.win.only_cache_holds(n.window_page)]
        candidates.sort(key=lambda n: n.last_used)
        freed = 0
        for n in candidates[:pages_wanted]:
            self.win.cache_release(n.window_page)
            n.window_page = None
            n.anchor_kept = False  # the flag is about this page; a page that fills the span again is not it
            freed += 1
        if self.full is None:
            self._prune_empty_leaves()
        return freed

    def _prune_empty_leaves(self) -> None:
        """Drop leaves that hold no KV at all (window-only models' dead ends)."""
        for n in reversed(self._nodes()):
            if not n.children and n.full_page is None and n.window_page is None:
                del n.parent.children[n.key]
                self.num_nodes -= 1

    def reclaimable(self, group: str) -> int:
        """Pages of `group` eviction could free right now (for can_allocate)."""
        if group == "window":
            return sum(1 for n in self._nodes() if n.window_page is not None and self.win.only_cache_holds(n.window_page))
        # Whole unreferenced subtrees can go, leaf first. _nodes() lists parents
        # before children, so walking it backwards settles children first.
        freeable: set[int] = set()
        pages = 0
        for n in reversed(self._nodes()):
            if self._unreferenced(n) and all(id(c) in freeable for c in n.children.values()):
                freeable.add(id(n))
                pages += n.full_page is not None
        return pages

    def clear(self) -> None:
        """Drop every unreferenced node (used by tests and on slot erase of everything)."""
        self.evict_nodes(self.num_nodes + 1)
