"""Page bookkeeping of the KV pool (scheduler/kv_pool.py): refcounts, free list, cache holds."""

from __future__ import annotations

import pytest

from scheduler.kv_pool import KVPool, PageGroup, PoolExhausted


def counts(g: PageGroup) -> tuple[int, int, int]:
    return g.num_free, g.num_owned, g.num_cached


def test_a_fresh_group_is_all_free_and_hands_out_low_pages_first():
    g = PageGroup("full", 4)
    assert counts(g) == (4, 0, 0)
    assert g.allocate(2) == [0, 1]
    assert counts(g) == (2, 2, 0)
    assert g.refs(0) == 1 and g.refs(2) == 0
    g.check_integrity()


def test_allocating_more_than_is_free_raises_and_takes_nothing():
    g = PageGroup("full", 3)
    g.allocate(2)
    with pytest.raises(PoolExhausted, match="asked for 2 pages, 1 free"):
        g.allocate(2)
    assert g.num_free == 1
    g.check_integrity()


def test_a_page_returns_to_the_free_list_only_when_its_last_reference_goes():
    g = PageGroup("full", 2)
    (p,) = g.allocate(1)
    g.incref(p)
    assert g.refs(p) == 2
    g.decref(p)
    assert g.num_free == 1 and g.refs(p) == 1
    g.decref(p)
    assert g.num_free == 2 and g.refs(p) == 0
    g.check_integrity()
    # The freed page is handed out again.
    assert p in g.allocate(2)


def test_incref_or_decref_of_a_free_page_is_refused():
    g = PageGroup("window", 2)
    with pytest.raises(ValueError, match="incref of free page 1"):
        g.incref(1)
    (p,) = g.allocate(1)
    g.decref(p)
    with pytest.raises(ValueError, match="decref of free page"):
        g.decref(p)
    g.check_integrity()


def test_a_cache_hold_moves_a_page_from_owned_to_cached_when_its_owner_lets_go():
    g = PageGroup("full", 4)
    a, b = g.allocate(2)
    g.cache_hold(a)
    assert g.refs(a) == 2 and g.is_cached(a)
    # Still owned while the sequence holds it.
    assert counts(g) == (2, 2, 0)
    assert not g.only_cache_holds(a)
    g.decref(a)
    assert g.only_cache_holds(a)
    assert counts(g) == (2, 1, 1)
    g.check_integrity()
    g.cache_release(a)
    assert not g.is_cached(a) and g.refs(a) == 0
    assert counts(g) == (3, 1, 0)
    g.check_integrity()


def test_caching_a_page_twice_or_releasing_an_uncached_page_is_refused():
    g = PageGroup("full", 2)
    (p,) = g.allocate(1)
    g.cache_hold(p)
    with pytest.raises(ValueError, match="cached twice"):
        g.cache_hold(p)
    assert g.refs(p) == 2, "a refused hold must not take a reference"
    (q,) = g.allocate(1)
    with pytest.raises(ValueError, match="not cached"):
        g.cache_release(q)
    assert g.refs(q) == 1
    g.check_integrity()


def test_a_free_page_cannot_be_cached():
    g = PageGroup("full", 2)
    with pytest.raises(ValueError, match="free page"):
        g.cache_hold(0)
    assert g.num_free == 2 and not g.is_cached(0)
    g.check_integrity()


def test_a_sequence_cannot_drop_the_reference_the_cache_holds():
    # A double free by a sequence must not silently free a page the prefix
    # cache still points at: the page would be handed out again while a
    # cached node serves it as someone else's KV.
    g = PageGroup("full", 2)
    (p,) = g.allocate(1)
    g.cache_hold(p)
    g.decref(p)  # the sequence lets go
    with pytest.raises(ValueError, match="cache"):
        g.decref(p)  # ... twice
    assert g.only_cache_holds(p) and g.num_free == 1
    g.check_integrity()


def test_free_owned_and_cached_always_add_up_to_the_total():
    g = PageGroup("full", 8)
    pages = g.allocate(6)
    for p in pages[:4]:
        g.cache_hold(p)
    for p in pages[:2]:
        g.decref(p)  # cached only
    g.incref(pages[5])  # shared by two sequences
    free, owned, cached = counts(g)
    assert (free, owned, cached) == (2, 4, 2)
    assert free + owned + cached == 8
    g.check_integrity()


def test_integrity_check_catches_a_corrupted_free_list():
    g = PageGroup("full", 3)
    g.allocate(1)
    g._free.append(g._free[0])  # simulate a double free past the guards
    with pytest.raises(AssertionError, match="twice"):
        g.check_integrity()
    h = PageGroup("full", 3)
    (p,) = h.allocate(1)
    h._free.append(p)  # a referenced page on the free list
    with pytest.raises(AssertionError, match="refs"):
        h.check_integrity()


def test_a_group_needs_at_least_one_page_and_a_pool_a_positive_page_size():
    with pytest.raises(ValueError, match="at least one page"):
        PageGroup("full", 0)
    with pytest.raises(ValueError, match="page_size"):
        KVPool(0, {"full": 4})


def test_the_pool_reports_usage_per_group_and_checks_every_group():
    pool = KVPool(4, {"full": 6, "window": 3})
    assert pool.group("window").num_pages == 3
    assert pool.group("missing") is None
    pool.group("full").allocate(2)
    (w,) = pool.group("window").allocate(1)
    pool.group("window").cache_hold(w)
    pool.group("window").decref(w)
    usage = {u.group: (u.total, u.free, u.owned, u.cached) for u in pool.usage()}
    assert usage == {"full": (6, 4, 2, 0), "window": (3, 2, 0, 1)}
    pool.check_integrity()
    pool.group("window")._refs[2] = -1
    with pytest.raises(AssertionError):
        pool.check_integrity()
