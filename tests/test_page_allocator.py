"""Moving pages between sequences, the pool and the prefix cache (scheduler/page_allocator.py)."""

from __future__ import annotations

from scheduler.kv_pool import KVPool
from scheduler.page_allocator import PageAllocator
from scheduler.prefix_cache import PrefixCache
from scheduler.sampling_params import SamplingParams
from scheduler.sequence import Sequence
from scheduler_sim import cache_nodes, check_bookkeeping

P = 4
W = 8


def make(full: int | None = 16, window_pages: int | None = None, window: int | None = None):
    groups = {}
    if full:
        groups["full"] = full
    if window_pages:
        groups["window"] = window_pages
    pool = KVPool(P, groups)
    cache = PrefixCache(pool, window)
    return pool, cache, PageAllocator(pool, cache)


def seq(tokens: list[int], seq_id: int = 0) -> Sequence:
    return Sequence(seq_id, f"r{seq_id}", 0, list(tokens), SamplingParams())


def computed(alloc: PageAllocator, s: Sequence, upto: int) -> None:
    """Pretend a forward pass computed s up to `upto`."""
    alloc.allocate(s, upto)
    s.num_computed = upto


def test_needs_counts_the_pages_still_missing_for_each_group():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    s = seq(list(range(20)))
    assert alloc.needs(s, 9) == {"full": 3, "window": 3}
    alloc.allocate(s, 9)
    assert len(s.full_pages) == len(s.window_pages) == 3
    assert alloc.needs(s, 12) == {"full": 0, "window": 0}
    assert alloc.needs(s, 13) == {"full": 1, "window": 1}
    # A released window page still occupies its slot in the table: nothing to re-allocate.
    alloc.release_window(s, 0, 4)
    assert alloc.needs(s, 12) == {"full": 0, "window": 0}
    check_bookkeeping(pool, cache, [s])


def test_a_full_only_model_needs_no_window_pages():
    _, _, alloc = make(full=8)
    assert alloc.needs(seq([1] * 10), 10) == {"full": 3}


def test_can_allocate_counts_what_the_cache_could_give_back():
    pool, cache, alloc = make(full=4)
    a = seq(list(range(12)))
    computed(alloc, a, 12)
    alloc.cache_prefix(a, 12)
    alloc.free(a)
    assert pool.group("full").num_free == 1 and cache.reclaimable("full") == 3
    assert alloc.can_allocate({"full": 4})
    assert not alloc.can_allocate({"full": 5})
    check_bookkeeping(pool, cache, [])


def test_allocation_evicts_cached_leaves_when_the_free_list_is_short():
    pool, cache, alloc = make(full=4)
    a = seq(list(range(12)))
    computed(alloc, a, 12)
    alloc.cache_prefix(a, 12)
    alloc.free(a)
    b = seq(list(range(100, 112)), 1)
    assert alloc.can_allocate(alloc.needs(b, 12))
    alloc.allocate(b, 12)
    assert len(b.full_pages) == 3
    assert cache.num_nodes == 1, "two of a's leaves were evicted, deepest first"
    assert cache.match(list(range(12)), 12).tokens == 4
    check_bookkeeping(pool, cache, [b])


def test_allocation_never_evicts_pages_a_running_sequence_holds():
    pool, cache, alloc = make(full=4)
    a = seq(list(range(8)))
    computed(alloc, a, 8)
    alloc.cache_prefix(a, 8)  # cached but a still runs
    b = seq(list(range(100, 112)), 1)
    assert cache.reclaimable("full") == 0
    assert not alloc.can_allocate(alloc.needs(b, 12))
    assert alloc.can_allocate(alloc.needs(b, 8))
    alloc.allocate(b, 8)
    assert cache.num_nodes == 2
    check_bookkeeping(pool, cache, [a, b])


def test_window_pressure_turns_cached_spans_into_tombstones_before_removing_any():
    pool, cache, alloc = make(full=16, window_pages=4, window=W)
    a = seq(list(range(16)))
    computed(alloc, a, 16)
    alloc.cache_prefix(a, 16)
    alloc.free(a)
    b = seq(list(range(100, 108)), 1)
    alloc.allocate(b, 8)
    assert cache.num_nodes == 4, "no node removed: the full KV is kept"
    assert pool.group("full").num_cached == 4
    tombstones = [n.window_page is None for n in sorted(cache_nodes(cache), key=lambda n: n.depth)]
    assert tombstones == [True, True, False, False]
    check_bookkeeping(pool, cache, [b])


def test_adopting_a_match_takes_references_and_starts_past_the_cached_prefix():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    a = seq(list(range(20)))
    computed(alloc, a, 20)
    alloc.cache_prefix(a, 20)
    alloc.free(a)
    b = seq(list(range(16)) + [99, 98, 97], 1)
    m = cache.match(b.all_ids, b.num_tokens - 1)
    assert m.tokens == 16
    alloc.adopt(b, m)
    assert b.num_computed == 16 and b.remaining == 3
    # Not locked: the cache holds its own reference, so b may drop its pages as it slides.
    assert b.locked_prefix == 0
    assert b.full_pages == m.full_pages
    # Window 8 at 16 reads [9, 16): pages 2 and 3; the earlier ones are not ours.
    assert b.window_pages[:2] == [None, None] and None not in b.window_pages[2:]
    assert b.released == 8
    for p in b.full_pages:
        assert pool.group("full").refs(p) == 2
    check_bookkeeping(pool, cache, [b])
    alloc.free(b)
    assert pool.group("full").num_owned == 0 and pool.group("window").num_owned == 0
    assert cache.num_nodes == 5
    check_bookkeeping(pool, cache, [])


def test_an_empty_match_adopts_nothing():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    b = seq(list(range(5)))
    alloc.adopt(b, cache.match(b.all_ids, 4))
    assert (b.num_computed, b.full_pages, b.window_pages, b.released) == (0, [], [], 0)


def test_releasing_the_window_frees_whole_pages_once_and_moves_the_frontier():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    s = seq(list(range(24)))
    computed(alloc, s, 24)
    free = pool.group("window").num_free
    assert alloc.release_window(s, 0, 8) == 2
    assert s.window_pages[:2] == [None, None] and s.released == 8
    assert pool.group("window").num_free == free + 2
    assert alloc.release_window(s, 0, 12) == 1, "already released pages are not freed twice"
    assert alloc.release_window(s, 12, 12) == 0
    assert s.full_pages and len(s.full_pages) == 6, "full pages are never released by a slide"
    check_bookkeeping(pool, cache, [s])


def test_releasing_a_window_page_the_cache_shares_leaves_it_cached():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    s = seq(list(range(16)))
    computed(alloc, s, 16)
    alloc.cache_prefix(s, 16)
    p = s.window_pages[0]
    alloc.release_window(s, 0, 4)
    assert pool.group("window").only_cache_holds(p)
    check_bookkeeping(pool, cache, [s])


def test_caching_a_prefix_takes_only_whole_computed_pages():
    pool, cache, alloc = make(full=16)
    s = seq(list(range(11)))
    computed(alloc, s, 11)
    assert alloc.cache_prefix(s, 3) == 0
    assert alloc.cache_prefix(s, 11) == 2
    assert cache.match(list(range(11)), 11).tokens == 8
    check_bookkeeping(pool, cache, [s])


def test_freeing_a_sequence_returns_every_reference_and_resets_its_progress():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    s = seq(list(range(18)))
    computed(alloc, s, 18)
    alloc.release_window(s, 0, 4)
    alloc.cache_prefix(s, 18)  # the released span becomes a tombstone
    alloc.free(s)
    assert (s.full_pages, s.window_pages, s.num_computed, s.released, s.locked_prefix) == ([], [], 0, 0, 0)
    for g in pool.groups.values():
        assert g.num_owned == 0
    assert pool.group("full").num_cached == 4 and pool.group("window").num_cached == 3
    check_bookkeeping(pool, cache, [])


def test_a_window_only_model_allocates_and_reuses_window_pages():
    pool, cache, alloc = make(full=None, window_pages=8, window=W)
    a = seq(list(range(24)))
    computed(alloc, a, 24)
    alloc.release_window(a, 0, 12)
    alloc.cache_prefix(a, 24)
    alloc.free(a)
    assert pool.group("window").num_cached == 3
    b = seq(list(range(24)) + [5], 1)
    m = cache.match(b.all_ids, 24)
    assert m.tokens == 24 and m.full_pages == []
    alloc.adopt(b, m)
    assert b.released == 16 and b.window_pages[:4] == [None] * 4
    # 7 pages are needed in all ([0, 25)); 2 are adopted, 5 free + 1 cached spare.
    assert alloc.needs(b, 25) == {"window": 1}
    assert alloc.can_allocate({"window": 6}) and not alloc.can_allocate({"window": 7})
    alloc.allocate(b, 25)
    check_bookkeeping(pool, cache, [b])


def test_caching_a_span_the_cache_already_holds_switches_to_its_pages_and_frees_the_duplicates():
    pool, cache, alloc = make(full=16, window_pages=16, window=W)
    a, b = seq(list(range(12))), seq(list(range(16)), 1)
    computed(alloc, a, 12)
    computed(alloc, b, 16)  # b computed a's 12 tokens again
    alloc.cache_prefix(a, 12)
    full_dup, window_dup = b.full_pages[:3], b.window_pages[:3]
    assert alloc.cache_prefix(b, 16) == 1
    assert b.full_pages[:3] == a.full_pages and b.window_pages[:3] == a.window_pages
    assert [pool.group("full").refs(p) for p in full_dup] == [0, 0, 0]
    assert [pool.group("window").refs(p) for p in window_dup] == [0, 0, 0]
    assert pool.group("full").refs(a.full_pages[0]) == 3  # a, b and the cache
    check_bookkeeping(pool, cache, [a, b])
