"""The prefix cache (scheduler/prefix_cache.py): whole pages, tombstones, two-tier LRU eviction.

Page 4 throughout; windowed tests use window 8, so a prefix ending at m is
usable iff the window pages covering [m - 7, m) are live.
"""

from __future__ import annotations

from types import SimpleNamespace

from scheduler.kv_pool import KVPool
from scheduler.prefix_cache import PrefixCache
from scheduler_sim import cache_nodes, check_bookkeeping

P = 4
W = 8


def make(full: int | None = 32, window_pages: int | None = None, window: int | None = None):
    groups = {}
    if full:
        groups["full"] = full
    if window_pages:
        groups["window"] = window_pages
    pool = KVPool(P, groups)
    return pool, PrefixCache(pool, window)


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def cache_computed(pool: KVPool, cache: PrefixCache, tokens: list[int], live: set[int] | None = None):
    """A sequence computed `tokens`, kept the window pages in `live` (all if None), cached, let go.

    Returns the pages the sequence had (full, window).
    """
    n_pages = -(-len(tokens) // P)
    full = pool.group("full").allocate(n_pages) if pool.group("full") else []
    window: list[int | None] = []
    if pool.group("window"):
        window = pool.group("window").allocate(n_pages)
        for i in range(n_pages):
            if live is not None and i not in live:
                pool.group("window").decref(window[i])
                window[i] = None
    created = cache.insert(tokens, full, window)
    for p in full:
        pool.group("full").decref(p)
    for p in window:
        if p is not None:
            pool.group("window").decref(p)
    check_bookkeeping(pool, cache, [])
    return full, window, created


def hold(pool: KVPool, match) -> SimpleNamespace:
    """Take a sequence's references on a match, as the allocator's adopt does; returns the holder."""
    for p in match.full_pages:
        pool.group("full").incref(p)
    for p in match.window_pages:
        if p is not None:
            pool.group("window").incref(p)
    return SimpleNamespace(full_pages=match.full_pages, window_pages=match.window_pages)


# -- whole pages -----------------------------------------------------------------------
def test_only_whole_pages_are_cached_and_the_partial_tail_page_is_freed():
    pool, cache = make(full=8)
    full, _, created = cache_computed(pool, cache, toks(10))
    assert created == 2 and cache.num_nodes == 2
    full_g = pool.group("full")
    assert full_g.num_cached == 2 and full_g.is_cached(full[0]) and full_g.is_cached(full[1])
    assert not full_g.is_cached(full[2]) and full_g.refs(full[2]) == 0
    assert full_g.num_free == 6


def test_a_match_returns_whole_pages_of_the_agreeing_prefix_with_their_pages():
    pool, cache = make()
    full, _, _ = cache_computed(pool, cache, toks(12))
    m = cache.match(toks(12) + [99], 100)
    assert m.tokens == 12 and m.full_pages == full[:3] and m.window_pages == []
    # Diverging inside the third page: only the first two pages agree.
    m = cache.match(toks(9) + [99, 98, 97, 96], 100)
    assert m.tokens == 8 and m.full_pages == full[:2]
    # Diverging at the first token: nothing.
    assert cache.match([99] + toks(11, 1), 100).tokens == 0


def test_a_match_never_reaches_past_max_tokens_so_the_last_token_is_always_fed():
    pool, cache = make()
    cache_computed(pool, cache, toks(8))
    # The engine asks with max_tokens = len - 1: an exact repeat of a cached
    # 8-token prompt must still feed its last token to get logits.
    assert cache.match(toks(8), 7).tokens == 4
    assert cache.match(toks(8), 8).tokens == 8
    assert cache.match(toks(8), 3).tokens == 0


def test_inserting_a_cached_path_again_keeps_the_existing_pages_and_creates_nothing():
    pool, cache = make()
    first, _, _ = cache_computed(pool, cache, toks(8))
    second, _, created = cache_computed(pool, cache, toks(12))
    assert created == 1 and cache.num_nodes == 3
    assert cache.match(toks(12), 12).full_pages == first[:2] + [second[2]]
    # The second sequence's duplicate pages were not cached and went back to the pool.
    assert pool.group("full").refs(second[0]) == 0 and pool.group("full").refs(second[1]) == 0


# -- LRU eviction of nodes ---------------------------------------------------------------
def test_eviction_removes_least_recently_used_leaves_first_and_parents_become_leaves():
    pool, cache = make(full=16)
    a, b = toks(8, 0), toks(8, 100)
    cache_computed(pool, cache, a)
    cache_computed(pool, cache, b)
    cache.match(a, 8)  # a is now the most recently used
    assert cache.evict_nodes(1) == 1
    assert cache.match(b, 8).tokens == 4, "b's leaf goes first"
    assert cache.match(a, 8).tokens == 8
    assert cache.evict_nodes(1) == 1
    assert cache.match(b, 8).tokens == 0, "then b's first page, which became a leaf"
    assert cache.match(a, 8).tokens == 8
    assert cache.evict_nodes(5) == 2 and cache.num_nodes == 0
    assert pool.group("full").num_free == 16
    check_bookkeeping(pool, cache, [])


def test_eviction_prefers_an_old_sibling_leaf_over_a_shared_parent():
    pool, cache = make(full=16)
    cache_computed(pool, cache, toks(4) + [50, 51, 52, 53])
    cache_computed(pool, cache, toks(4) + [60, 61, 62, 63])
    assert cache.evict_nodes(1) == 1
    assert cache.match(toks(4) + [50, 51, 52, 53], 8).tokens == 4, "the older leaf went"
    assert cache.match(toks(4) + [60, 61, 62, 63], 8).tokens == 8, "the shared parent stayed"
    check_bookkeeping(pool, cache, [])


def test_nodes_a_sequence_still_reads_are_never_evicted():
    pool, cache = make(full=16)
    a, b = toks(12, 0), toks(8, 100)
    cache_computed(pool, cache, a)
    cache_computed(pool, cache, b)
    m = cache.match(a, 8)  # a sequence adopts a's first two pages
    seq = hold(pool, m)
    assert cache.reclaimable("full") == 3  # b's two pages and a's third
    assert cache.evict_nodes(100) == 3
    assert cache.num_nodes == 2
    assert cache.match(a, 12).full_pages == m.full_pages
    check_bookkeeping(pool, cache, [seq])
    for p in m.full_pages:
        assert pool.group("full").refs(p) == 2


def test_clear_drops_every_unreferenced_node_and_returns_the_pages():
    pool, cache = make(full=16)
    cache_computed(pool, cache, toks(12))
    cache_computed(pool, cache, toks(4) + [7, 7, 7, 7])
    cache.clear()
    assert cache.num_nodes == 0 and pool.group("full").num_free == 16
    check_bookkeeping(pool, cache, [])


# -- tombstones and the window rule -------------------------------------------------------
def test_a_path_of_tombstones_before_a_live_window_is_usable():
    pool, cache = make(full=16, window_pages=16, window=W)
    _, window, _ = cache_computed(pool, cache, toks(24), live={4, 5})
    m = cache.match(toks(24) + [1], 24)
    assert m.tokens == 24
    assert m.window_pages == [None, None, None, None, window[4], window[5]]


def test_the_deepest_point_whose_window_is_live_is_chosen():
    pool, cache = make(full=16, window_pages=16, window=W)
    # Pages 3 and 4 live, 5 a tombstone: 24 needs pages 4-5 ([17, 24)), 20 needs 3-4 ([13, 20)).
    _, window, _ = cache_computed(pool, cache, toks(24), live={3, 4})
    m = cache.match(toks(24) + [1], 24)
    assert m.tokens == 20
    assert m.window_pages == [None, None, None, window[3], window[4]]


def test_a_tombstone_inside_the_window_makes_a_point_unusable_but_not_one_past_it():
    pool, cache = make(full=16, window_pages=16, window=W)
    cache_computed(pool, cache, toks(24), live={0, 1, 2, 4, 5})
    assert cache.match(toks(24), 24).tokens == 24, "page 3 is outside [17, 24)"
    assert cache.match(toks(20), 20).tokens == 12, "20 reads page 3; 16 reads it too; 12 reads pages 1-2"


def test_nothing_matches_when_no_point_has_a_live_window():
    pool, cache = make(full=16, window_pages=16, window=W)
    cache_computed(pool, cache, toks(24), live={5})
    m = cache.match(toks(24), 24)
    assert (m.tokens, m.full_pages, m.window_pages) == (0, [], [])


def test_a_match_hands_back_only_the_window_pages_a_continuation_reads():
    pool, cache = make(full=16, window_pages=16, window=W)
    _, window, _ = cache_computed(pool, cache, toks(16))
    m = cache.match(toks(16), 16)
    # [9, 16) lives in pages 2 and 3; pages 0 and 1 are live in the cache but not needed.
    assert m.window_pages == [None, None, window[2], window[3]]
    assert cache.match(toks(4), 4).window_pages == [window[0]]


def test_a_tombstone_adopts_a_live_window_page_offered_for_the_same_span():
    pool, cache = make(full=16, window_pages=16, window=W)
    full1, win1, _ = cache_computed(pool, cache, toks(24), live={4, 5})
    full2, win2, created = cache_computed(pool, cache, toks(24))  # recomputed with every window live
    assert created == 0
    nodes = sorted(cache_nodes(cache), key=lambda n: n.depth)
    assert [n.full_page for n in nodes] == full1, "full pages stay the first computation's"
    assert [n.window_page for n in nodes] == win2[:4] + win1[4:], "tombstones adopted, live pages kept"
    wg = pool.group("window")
    assert wg.refs(win2[4]) == 0 and wg.refs(win2[5]) == 0, "the duplicate live pages were freed"
    assert wg.num_cached == 6
    assert cache.match(toks(20), 20).tokens == 20


def test_window_pressure_tombstones_lru_nodes_without_removing_them():
    pool, cache = make(full=16, window_pages=16, window=W)
    a, b = toks(8, 0), toks(8, 100)
    cache_computed(pool, cache, a)
    cache_computed(pool, cache, b)
    cache.match(a, 8)
    wg = pool.group("window")
    free_before = wg.num_free
    assert cache.evict_windows(2) == 2
    assert wg.num_free == free_before + 2
    assert cache.num_nodes == 4 and pool.group("full").num_cached == 4, "full KV survives"
    assert all(n.window_page is None for n in cache_nodes(cache) if n.key[0] >= 100), "b was older"
    assert cache.match(b, 8).tokens == 0
    assert cache.match(a, 8).tokens == 8
    check_bookkeeping(pool, cache, [])


def test_window_pressure_tombstones_the_front_of_a_path_first_keeping_its_deepest_match():
    pool, cache = make(full=16, window_pages=16, window=W)
    cache_computed(pool, cache, toks(24))
    assert cache.evict_windows(4) == 4
    assert [n.window_page is None for n in sorted(cache_nodes(cache), key=lambda n: n.depth)] == [
        True, True, True, True, False, False,
    ]
    assert cache.match(toks(24), 24).tokens == 24


def test_window_pages_a_sequence_still_reads_are_never_tombstoned():
    pool, cache = make(full=16, window_pages=16, window=W)
    cache_computed(pool, cache, toks(16))
    m = cache.match(toks(16), 16)
    seq = hold(pool, m)
    assert cache.reclaimable("window") == 2
    assert cache.evict_windows(10) == 2
    assert cache.match(toks(16), 16).window_pages == m.window_pages
    for p in m.window_pages[2:]:
        assert pool.group("window").refs(p) == 2
    check_bookkeeping(pool, cache, [seq])


def test_reclaimable_is_exactly_what_eviction_then_frees():
    pool, cache = make(full=32, window_pages=32, window=W)
    cache_computed(pool, cache, toks(16, 0))
    cache_computed(pool, cache, toks(8, 0) + toks(8, 200))  # shares two pages with the first
    cache_computed(pool, cache, toks(12, 100), live={1, 2})
    m = cache.match(toks(8, 0) + toks(8, 200), 12)  # a sequence reads 12 tokens of the second
    seq = hold(pool, m)
    fg, wg = pool.group("full"), pool.group("window")
    win_reclaimable, full_reclaimable = cache.reclaimable("window"), cache.reclaimable("full")
    # Window: live pages are 4 (first path) + 2 (the second's own) + 2 (third), less the two
    # the sequence reads ([5, 12): pages 1 and 2 of the second path).
    assert win_reclaimable == 4 + 2 + 2 - 2
    free = wg.num_free
    assert cache.evict_windows(100) == win_reclaimable
    assert wg.num_free == free + win_reclaimable
    # Full: everything but the three pages the sequence holds.
    assert full_reclaimable == cache.num_nodes - 3
    free = fg.num_free
    assert cache.evict_nodes(100) == full_reclaimable
    assert fg.num_free == free + full_reclaimable
    assert cache.reclaimable("full") == cache.reclaimable("window") == 0
    assert cache.num_nodes == 3
    check_bookkeeping(pool, cache, [seq])


def test_a_window_only_model_caches_window_pages_and_tombstones_without_full_pages():
    pool, cache = make(full=None, window_pages=16, window=W)
    _, window, created = cache_computed(pool, cache, toks(24), live={4, 5})
    assert created == 6 and cache.num_nodes == 6
    assert pool.group("window").num_cached == 2, "tombstones of a window-only model cost no pages"
    m = cache.match(toks(24) + [1], 24)
    assert (m.tokens, m.full_pages) == (24, [])
    assert m.window_pages[4:] == window[4:]
    # Window pressure tombstones the live pages; the dead path is pruned.
    assert cache.reclaimable("window") == 2
    assert cache.evict_windows(2) == 2
    assert cache.num_nodes == 0 and pool.group("window").num_free == 16
    assert cache.match(toks(24), 24).tokens == 0
    check_bookkeeping(pool, cache, [])


def test_an_anchor_mark_goes_with_its_window_page_and_not_to_the_page_that_refills_the_span():
    pool, cache = make(full=32, window_pages=32, window=W)
    tokens = toks(16)
    cache_computed(pool, cache, tokens)
    assert cache.mark_anchor_kept(tokens, 8, 16) == 2  # pages 2 and 3 were live only by an anchor
    assert cache.match(tokens, 16).through_anchor
    assert cache.evict_windows(32) == 4  # every window page tombstoned, the marks with them
    cache_computed(pool, cache, tokens)  # a plain computation fills the spans again
    assert not cache.match(tokens, 16).through_anchor
