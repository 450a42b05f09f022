"""Continuous batching (scheduler/batch_scheduler.py), driven by the fake engine in scheduler_sim.

Every `Sim.step()` checks the chunk invariants, the fake KV each chunk reads
and writes, and that every page reference is explained by a sequence table or
a cache node -- so each test below also asserts "integrity after every step".
Page 4 throughout.
"""

from __future__ import annotations

import random

import pytest

from scheduler.pool_budget import align_down, swa_tokens_per_request
from scheduler.sequence import SeqStatus
from scheduler_sim import Sim, anchor_at, default_token, expected_output

P = 4


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def assert_completed(sim: Sim, seqs) -> None:
    for s in seqs:
        assert s.status is SeqStatus.FINISHED and s.finish_reason == "length"
        assert s.output_ids == expected_output(s.prompt_ids, s.params.max_tokens, sim.token_fn), s.seq_id
    assert all(n == 0 for n in sim.owned().values()), f"pages leaked: {sim.owned()}"
    sim.pool.check_integrity()


# -- batching ------------------------------------------------------------------------------
def test_a_long_prompt_is_prefilled_in_chunks_within_the_token_budget():
    sim = Sim(max_batched_tokens=8)
    (a,) = sim.submit(toks(30), 3)
    sizes = []
    while a.num_computed < 30:
        sizes.append(sim.step().batch.num_tokens)
    assert sizes == [8, 8, 8, 6]
    assert sim.log[-1].decode_chunks == 0 and len(a.output_ids) == 1, "the chunk reaching the end samples"
    sim.run()
    assert_completed(sim, [a])


def test_chunked_prefill_shares_the_step_with_running_decodes():
    sim = Sim(max_batched_tokens=8)
    (a,) = sim.submit(toks(5), 20)
    sim.step()
    (b,) = sim.submit(toks(40, 100), 3)
    mixed = []
    while b.num_computed < 40:
        dec = sim.step()
        assert dec.batch.num_tokens <= 8
        mixed.append((sim.log[-1].decode_chunks, sim.log[-1].prefill_tokens))
    # a decodes every step while b's prompt goes through in chunks of what is left.
    assert mixed == [(1, 7)] * 5 + [(1, 5)]
    sim.run()
    assert_completed(sim, [a, b])


def test_no_more_than_max_num_seqs_run_at_once():
    sim = Sim(max_num_seqs=2, max_batched_tokens=64)
    seqs = [s for i in range(5) for s in sim.submit(toks(6, 100 * i), 4)]
    dec = sim.step()
    assert [s.seq_id for s in dec.seqs] == [0, 1] and len(sim.sched.waiting) == 3
    peak = 0
    while sim.sched.has_work():
        sim.step()
        peak = max(peak, len(sim.sched.running))
    assert peak == 2
    assert_completed(sim, seqs)


def test_waiting_requests_are_admitted_first_come_first_served():
    sim = Sim(max_num_seqs=1, max_batched_tokens=64)
    seqs = [s for i in range(4) for s in sim.submit(toks(5, 100 * i), 3)]
    first_step = {}
    while sim.sched.has_work():
        sim.step()
        for sid in sim.log[-1].seq_ids:
            first_step.setdefault(sid, len(sim.log))
    assert sorted(first_step, key=first_step.get) == [0, 1, 2, 3]
    assert [s.seq_id for s in sim.finished] == [0, 1, 2, 3]
    assert_completed(sim, seqs)


def test_the_head_of_the_queue_waits_for_room_rather_than_being_overtaken():
    sim = Sim(full_pages=10, max_num_seqs=4, max_batched_tokens=64)
    (a,) = sim.submit(toks(20), 6)  # 5 pages, 6 with its output
    sim.step()
    (big,) = sim.submit(toks(24, 100), 2)  # needs 6 pages: not while a runs
    (small,) = sim.submit(toks(4, 200), 2)  # would fit now
    while big.status is SeqStatus.WAITING:
        assert small.status is SeqStatus.WAITING, "a later request overtook the head of the queue"
        sim.step()
    assert a.finished, "big got its pages only when a finished"
    sim.run()
    assert_completed(sim, [a, big, small])


# -- prefix reuse --------------------------------------------------------------------------
def test_a_request_sharing_a_long_prefix_with_a_finished_one_starts_from_the_cached_prefix():
    sim = Sim(max_batched_tokens=16)
    (a,) = sim.submit(toks(37), 10)
    sim.run()
    assert a.num_cached_prompt == 0
    prompt = a.all_ids[:43] + toks(10, 500)  # agrees with a's prompt and 6 of its outputs
    (b,) = sim.submit(prompt, 5)
    dec = sim.step()
    assert b.num_cached_prompt == 40, "whole pages of the 43 agreeing tokens"
    assert dec.batch.chunks[0].start == 40 and dec.batch.num_tokens == len(prompt) - 40
    assert sim.sched.counters.cache_hit_tokens == 40
    sim.run()
    assert_completed(sim, [a, b])


def test_an_exact_repeat_of_a_cached_prompt_still_feeds_its_last_token():
    sim = Sim(max_batched_tokens=64)
    (a,) = sim.submit(toks(16), 1)
    sim.run()
    (b,) = sim.submit(toks(16), 3)
    dec = sim.step()
    assert b.num_cached_prompt == 12 and dec.batch.chunks[0].token_ids == toks(4, 12)
    sim.run()
    assert_completed(sim, [a, b])


# -- preemption ----------------------------------------------------------------------------
def test_preemption_chooses_the_most_recently_admitted_sequence():
    sim = Sim(full_pages=6, max_num_seqs=3, max_batched_tokens=64)
    a, b, c = (sim.submit(toks(8, 100 * i), 10)[0] for i in range(3))
    sim.step()  # all three prompts fill the pool exactly
    assert sim.pool.group("full").num_free == 0
    assert sim.sched.running == [a, b, c]
    dec = sim.step()  # each needs a third page now
    assert dec.preempted == [c]
    assert c.status is SeqStatus.WAITING and sim.sched.waiting[0] is c and c.preemptions == 1
    assert [s.seq_id for s in dec.seqs] == [a.seq_id, b.seq_id]
    sim.run()
    assert_completed(sim, [a, b, c])
    assert sim.sched.counters.preemptions >= 1


def test_a_sequence_preempted_mid_decode_completes_with_the_same_tokens():
    sim = Sim(full_pages=12, max_num_seqs=2, max_batched_tokens=64)
    (a,) = sim.submit(toks(6), 30)
    (b,) = sim.submit(toks(6, 100), 30)
    sim.run_until(lambda: b.preemptions > 0)
    assert len(b.output_ids) > 1, "preempted while decoding, with output to recompute"
    sim.run()
    assert_completed(sim, [a, b])


def test_a_pool_too_small_for_the_load_completes_every_sequence_without_leaking_pages():
    sim = Sim(full_pages=24, max_num_seqs=4, max_batched_tokens=32)
    seqs = [s for i in range(10) for s in sim.submit(toks(5 + 3 * i, 50 * i), 40 - 2 * i)]
    sim.run()
    assert sim.sched.counters.preemptions >= 3
    assert sum(s.preemptions for s in seqs) == sim.sched.counters.preemptions
    assert_completed(sim, seqs)


# -- abort ---------------------------------------------------------------------------------
def test_aborting_mid_prefill_returns_every_page_at_once():
    sim = Sim(max_batched_tokens=8)
    (a,) = sim.submit(toks(5), 20)
    (b,) = sim.submit(toks(40, 100), 5)
    sim.run_until(lambda: 0 < b.num_computed < 40)
    sim.abort(b)
    assert b.finish_reason == "abort" and not b.full_pages
    assert sim.pool.group("full").num_owned == len(a.full_pages)
    sim.run()
    assert_completed(sim, [a])


def test_aborting_mid_decode_returns_every_page_and_a_waiting_abort_takes_nothing():
    sim = Sim(max_num_seqs=1, max_batched_tokens=16)
    (a,) = sim.submit(toks(9), 30)
    (b,) = sim.submit(toks(9, 100), 5)
    sim.run_until(lambda: len(a.output_ids) == 10)
    sim.abort(b)  # still waiting for a seat
    assert b.finished and b not in sim.sched.waiting
    assert a.is_decoding and a.full_pages
    sim.abort(a)
    assert sim.owned() == {"full": 0} and not sim.sched.has_work()
    sim.pool.check_integrity()


def test_a_prefix_computed_twice_is_held_once_after_caching():
    # b was admitted before a's prompt was cached, so both computed it. Once
    # cached, b reads the cache's copy and its duplicate goes back to the
    # pool; otherwise a's cached pages, pinned as ancestors of b's nodes,
    # would starve b in a pool that holds one sequence of its length.
    sim = Sim(full_pages=12, max_num_seqs=2, max_batched_tokens=64)
    (a,) = sim.submit(toks(16), 4)
    (b,) = sim.submit(toks(20), 24)  # a's prompt and one page more
    dec = sim.step()
    assert dec.seqs == [a, b] and b.num_cached_prompt == 0
    assert b.full_pages[:4] == a.full_pages[:4]
    assert sim.pool.group("full").num_owned == 4 + 1  # the four shared, b's own fifth
    sim.run()
    assert_completed(sim, [a, b])


# -- n > 1 ---------------------------------------------------------------------------------
def test_siblings_wait_for_the_leaders_prompt_and_then_share_its_pages():
    sim = Sim(max_num_seqs=4, max_batched_tokens=64)
    (other,) = sim.submit(toks(6, 900), 8)
    leader, s1, s2 = sim.submit(toks(22), 6, n=3)
    dec = sim.step()
    assert [s.seq_id for s in dec.seqs] == [other.seq_id, leader.seq_id], "siblings wait, others do not"
    assert s1.status is SeqStatus.WAITING and leader.prompt_cached
    sim.step()
    assert s1.num_cached_prompt == s2.num_cached_prompt == 20
    shared = leader.full_pages[:5]
    assert s1.full_pages[:5] == s2.full_pages[:5] == shared
    for p in shared:
        # leader + cache + two siblings
        assert sim.pool.group("full").refs(p) == 4
    sim.run()
    assert s1.output_ids == s2.output_ids == leader.output_ids
    assert_completed(sim, [other, leader, s1, s2])


# -- window models ---------------------------------------------------------------------------
WINDOW = 16


def window_sim(**kw) -> Sim:
    opts = dict(full_pages=128, window_pages=64, window=WINDOW, eviction_interval=2, max_batched_tokens=8)
    opts.update(kw)
    return Sim(**opts)


@pytest.mark.parametrize("budget", [8, 3, 1])
def test_the_prefill_slide_releases_window_pages_as_chunks_advance(budget):
    # Budget 1 feeds the prompt a token at a time: still prefill, still slid.
    sim = window_sim(max_batched_tokens=budget)
    (a,) = sim.submit(toks(64), 2)
    while a.num_computed < 64:
        sim.step()
        frontier = max(0, align_down(a.num_computed - WINDOW - P, P))
        assert a.released == frontier
        assert all(p is None for p in a.window_pages[:frontier // P])
        assert all(p is not None for p in a.window_pages[frontier // P:])
        # Held: the window plus a page of slack plus the chunk just fed.
        assert sum(p is not None for p in a.window_pages) <= (WINDOW + P + budget) // P + 1
    sim.run()
    assert_completed(sim, [a])


def test_when_the_prompt_completes_only_the_window_before_its_end_stays_held():
    sim = window_sim()
    (a,) = sim.submit(toks(40), 30)
    sim.run_until(lambda: a.prompt_cached)
    # [20, 40): the window before the prompt end plus a page, nothing earlier.
    assert [p is not None for p in a.window_pages[:10]] == [False] * 5 + [True] * 5
    assert a.locked_prefix == 40
    sim.run()
    assert_completed(sim, [a])


def test_a_cached_prefix_adopted_at_admission_is_let_go_once_the_window_moves_on():
    sim = window_sim(max_batched_tokens=4)
    (first,) = sim.submit(toks(24), 1)
    sim.run()
    (b,) = sim.submit(toks(24) + toks(36, 100), 10)
    sim.step()
    assert b.num_cached_prompt == 24
    adopted = b.window_pages[2:6]
    assert None not in adopted, "a match at 24 reads [9, 24): pages 2-5"
    for p in adopted:
        assert sim.pool.group("window").refs(p) == 2
    sim.run_until(lambda: b.prompt_cached)
    assert b.window_pages[2:6] == [None] * 4
    for p in adopted:
        assert sim.pool.group("window").only_cache_holds(p), "the cache keeps what b let go"
    sim.run()
    assert_completed(sim, [first, b])


@pytest.mark.parametrize("anchors", [False, True])
@pytest.mark.parametrize("interval", [2, 4])
def test_a_single_sequence_never_starves_in_a_window_pool_at_the_floor(anchors, interval):
    floor_pages = -(-swa_tokens_per_request(WINDOW, P, interval, anchors) // P)
    for first_len, extra in [(16, 22), (16, 47), (22, 36), (25, 47)]:
        sim = window_sim(window_pages=floor_pages, eviction_interval=interval, anchors=anchors, anchor_token=5,
                         token_fn=anchor_at(first_len + extra + 30, 5), max_num_seqs=1)
        (first,) = sim.submit(toks(first_len), 1)
        sim.run()
        (b,) = sim.submit(toks(first_len) + toks(extra, 100), 50)
        sim.run()  # Sim.step fails on a starved sequence
        assert b.num_cached_prompt > 0
        assert_completed(sim, [first, b])


def test_the_decode_slide_runs_only_on_its_cadence():
    sim = window_sim(eviction_interval=4)
    (a,) = sim.submit(toks(8), 80)
    sim.run()
    slides = [r.forward_iter for r in sim.log if r.released_window_pages and r.decode_chunks]
    assert len(slides) >= 10
    assert all(it % 4 == 0 for it in slides)
    assert_completed(sim, [a])


ANCHOR = 5
PROMPT = 24
# The opener is sampled as token 92 (anchor_len 93) of a 104-token turn.
OPENER_AT = 92
TURN_OUTPUT = 80


def anchored_turn(anchors: bool, opener_at: int = OPENER_AT, interval: int = 2):
    sim = window_sim(full_pages=256, window_pages=128, anchors=anchors, anchor_token=ANCHOR,
                     eviction_interval=interval, token_fn=anchor_at(opener_at, ANCHOR))
    (a,) = sim.submit(toks(PROMPT), TURN_OUTPUT)
    return sim, a


def path_liveness(sim: Sim, ids: list[int]) -> list[bool]:
    """Window liveness of each cached node on the path of `ids`."""
    out, node = [], sim.cache.root
    for i in range(len(ids) // P):
        node = node.children.get(tuple(ids[i * P:(i + 1) * P]))
        if node is None:
            break
        out.append(node.window_page is not None)
    return out


def test_an_anchor_stops_the_slide_and_is_held_until_finish():
    sim, a = anchored_turn(anchors=True)
    sim.run_until(lambda: a.anchor.anchor_len is not None)
    anchor = a.anchor.anchor_len
    assert anchor == OPENER_AT + 1 and sim.sched.counters.anchors_set == 1
    # The slide trailed the cursor until the opener; from here on the anchor caps it.
    frontier = a.released
    assert PROMPT < frontier <= align_down(anchor - 1 - WINDOW - P, P)
    while not a.finished:
        assert a.released == frontier, "the window slid past what the anchor holds"
        sim.step()
    assert sim.sched.counters.anchors_dropped == 0
    live = path_liveness(sim, a.all_ids)
    assert len(live) == (PROMPT + TURN_OUTPUT - 1) // P
    # At finish: tombstones below the released frontier, live from it to the end,
    # and the window before the prompt end stayed live too.
    f = frontier // P
    assert live[f:] == [True] * (len(live) - f)
    assert live[PROMPT // P:f] == [False] * (f - PROMPT // P)
    assert live[(PROMPT - WINDOW - P) // P:PROMPT // P] == [True] * ((WINDOW + P) // P)
    assert_completed(sim, [a])


def test_a_drifted_anchor_is_dropped_and_the_slide_follows_the_cursor_again():
    sim, a = anchored_turn(anchors=True, opener_at=30)
    sim.run()
    assert sim.sched.counters.anchors_set == 1 and sim.sched.counters.anchors_dropped == 1
    assert a.anchor.anchor_len is None
    live = path_liveness(sim, a.all_ids)
    assert not any(live[PROMPT // P:len(live) - (WINDOW + 3 * P) // P]), "nothing held around the old anchor"
    assert_completed(sim, [a])


@pytest.mark.parametrize("interval", [1, 3, 4])
def test_the_next_turn_rejoins_at_the_anchor_only_with_anchors_on(interval):
    matched = {}
    for anchors in (True, False):
        sim, a = anchored_turn(anchors, interval=interval)
        sim.run()
        anchor = OPENER_AT + 1
        # The harness rewrites the call: the next prompt agrees up to the opener, then diverges.
        (nxt,) = sim.submit(a.all_ids[:anchor] + toks(20, 600), 4)
        sim.step()
        matched[anchors] = nxt.num_cached_prompt
        sim.run()
        assert_completed(sim, [a, nxt])
    assert matched[True] >= OPENER_AT + 1 - P
    assert matched[False] <= PROMPT, "without anchors only the prompt end survives"


def test_a_window_only_model_runs_shares_prefixes_and_returns_every_page():
    sim = Sim(full_pages=None, window_pages=24, window=WINDOW, eviction_interval=2, max_num_seqs=3,
              max_batched_tokens=8)
    (a,) = sim.submit(toks(30), 20)
    sim.run()
    (b,) = sim.submit(a.all_ids[:40] + toks(9, 300), 12)
    (c,) = sim.submit(toks(12, 700), 30)
    sim.run()
    assert b.num_cached_prompt == 40
    assert_completed(sim, [a, b, c])


def test_a_sequence_that_cannot_fit_even_alone_is_reported_starved_not_preempted_forever():
    sim = Sim(full_pages=3, max_batched_tokens=64)
    (a,) = sim.submit(toks(8), 10)
    sim.run_until(lambda: a.num_computed == 12)  # three full pages
    dec = sim.sched.schedule()  # the 13th token needs a fourth page
    assert dec.starved == [a] and dec.empty and not dec.preempted
    assert a.status is SeqStatus.RUNNING and sim.sched.counters.preemptions == 0
    sim.sched.finish(a, "length")  # what the engine does with it
    assert sim.owned() == {"full": 0}
    sim.pool.check_integrity()


# -- slot pins -------------------------------------------------------------------------------
def _pin(sim: Sim, seq, released: list[str], name: str):
    """Hold seq's cached span the way a slot pins its last request; `released` hears if it gives way."""
    return sim.alloc.hold_cached(seq.all_ids[: seq.num_tokens - 1], on_release=lambda: released.append(name))


def test_an_idle_slots_pin_gives_way_to_a_request_that_needs_its_pages():
    sim = Sim(full_pages=10, max_batched_tokens=64)
    (a,) = sim.submit(toks(28), 5)
    sim.run()
    released: list[str] = []
    _pin(sim, a, released, "a")  # 8 of the 10 pages
    (b,) = sim.submit(toks(24, 100), 4)  # 7 pages: only if the pin lets go
    sim.run()  # before pins gave way, b waited for room nothing would ever free
    assert released == ["a"] and sim.alloc.holds_released == 1
    assert sim.alloc.live_holds() == []
    assert_completed(sim, [a, b])


def test_the_oldest_pin_gives_way_first_and_only_as_many_as_are_needed():
    sim = Sim(full_pages=12, max_batched_tokens=64)
    (a,) = sim.submit(toks(12), 5)
    (b,) = sim.submit(toks(12, 100), 5)
    sim.run()
    released: list[str] = []
    _pin(sim, a, released, "a")  # 4 pages
    newer = _pin(sim, b, released, "b")  # 4 pages
    (c,) = sim.submit(toks(20, 200), 4)  # 6 pages: one pin must go
    sim.run()
    assert released == ["a"] and sim.alloc.live_holds() == [newer]
    sim.alloc.drop_hold(newer)
    assert_completed(sim, [a, b, c])


def test_a_pin_stays_while_there_is_room():
    sim = Sim(full_pages=12, max_batched_tokens=64)
    (a,) = sim.submit(toks(12), 5)
    sim.run()
    released: list[str] = []
    held = _pin(sim, a, released, "a")
    (b,) = sim.submit(toks(12, 100), 5)
    sim.run()
    assert released == [] and sim.alloc.live_holds() == [held]
    sim.alloc.drop_hold(held)
    sim.alloc.drop_hold(held)  # a second drop of the same hold gives nothing back twice
    assert_completed(sim, [a, b])


def test_a_running_sequence_takes_a_pins_pages_before_anyone_is_preempted():
    sim = Sim(full_pages=12, max_batched_tokens=64)
    (a,) = sim.submit(toks(16), 5)
    sim.run()
    (b,) = sim.submit(toks(8, 100), 30)  # grows from 2 pages to 10
    (c,) = sim.submit(toks(4, 200), 2)
    sim.step()
    released: list[str] = []
    _pin(sim, a, released, "a")  # 5 pages, taken while b and c run
    sim.run()
    assert released == ["a"] and sim.sched.counters.preemptions == 0
    assert_completed(sim, [a, b, c])



def test_the_head_of_the_queue_keeps_the_pins_when_releasing_them_would_not_make_room():
    sim = Sim(full_pages=12, max_batched_tokens=64)
    (a,) = sim.submit(toks(8), 5)
    sim.run()
    released: list[str] = []
    _pin(sim, a, released, "a")  # 2 pages
    (b,) = sim.submit(toks(24, 100), 6)  # 6 pages, 8 by its end
    sim.step()
    (c,) = sim.submit(toks(24, 200), 4)  # 7 pages: only once b is done, pin or no pin
    while not b.finished:
        sim.step()
        assert c.status is SeqStatus.WAITING or b.finished
    sim.run()
    assert released == [] and sim.alloc.holds_released == 0, "a pin was given up for nothing"
    sim.alloc.drop_hold(sim.alloc.live_holds()[0])
    assert_completed(sim, [a, b, c])


def test_a_pin_of_no_pages_is_not_a_hold():
    sim = Sim(full_pages=8)
    held = sim.alloc.hold_cached(toks(3))  # shorter than a page: nothing cached on its path
    assert held.tokens == 0 and sim.alloc.live_holds() == []
    sim.alloc.drop_hold(held)
    sim.pool.check_integrity()


def random_workload(seed: int) -> None:
    r = random.Random(seed)
    window = r.choice([None, 8, 16])
    page = r.choice([2, 4])
    interval = r.randint(1, 4)
    anchors = r.random() < 0.5
    max_seqs = r.randint(1, 4)
    budget = r.randint(max_seqs, 16)
    max_len = 60
    full = window is None or r.random() < 0.7
    full_pages = r.randint(max_len // page + 1, 2 * max_len // page) if full else None
    window_pages = None
    if window:
        budget = min(budget, window)
        window_pages = -(-swa_tokens_per_request(window, page, interval, anchors) // page)

    def model(ids: list[int]) -> int:
        tok = default_token(ids)
        return ANCHOR if tok % 17 == 0 else tok

    sim = Sim(page=page, full_pages=full_pages, window_pages=window_pages, window=window,
              eviction_interval=interval, anchors=anchors, anchor_token=ANCHOR, max_num_seqs=max_seqs,
              max_batched_tokens=budget, token_fn=model)
    shared = [r.randrange(50, 90) for _ in range(30)]
    seqs, pending = [], r.randint(3, 8)
    pins: list = []  # slots pinning finished requests' spans, as many as --parallel, oldest first
    n_slots = r.randint(0, 3)
    for _ in range(3000):
        if pending and r.random() < 0.3:
            pending -= 1
            n_tokens = r.randint(1, 30)
            prompt = shared[:r.randint(0, n_tokens)]
            prompt += [r.randrange(100, 200) for _ in range(n_tokens - len(prompt))]
            seqs += sim.submit(prompt, r.randint(1, max_len - n_tokens), n=r.choice([1, 1, 2, 3]))
        live = [s for s in seqs if not s.finished]
        if live and r.random() < 0.02:
            sim.abort(r.choice(live))
        if not pending and not sim.sched.has_work():
            break
        done_before = len(sim.finished)
        sim.step()
        for seq in sim.finished[done_before:]:
            if n_slots and seq.finish_reason == "length" and r.random() < 0.5:
                pins.append(sim.alloc.hold_cached(seq.all_ids[: seq.num_tokens - 1]))
                if len(pins) > n_slots:
                    sim.alloc.drop_hold(pins.pop(0))
    assert not sim.sched.has_work()
    for held in pins:
        sim.alloc.drop_hold(held)
    assert_completed(sim, [s for s in seqs if s.finish_reason != "abort"])


def test_random_workloads_keep_the_books_straight_after_every_step():
    # Mixed models (full, window, window-only), shared prefixes, n > 1, aborts,
    # pools at the floor: every step is checked by the sim, every survivor's
    # tokens are the model's, and nothing leaks.
    for seed in range(25):
        random_workload(seed)


# -- prompt logprobs ------------------------------------------------------------------------
def test_a_scored_prompt_is_computed_whole_though_its_prefix_is_cached():
    sim = Sim(max_batched_tokens=64)
    (plain,) = sim.submit(toks(14), 2)
    sim.run()
    (again,) = sim.submit(toks(14), 2)
    assert sim.step().batch.chunks[0].start == 12, "an unscored prompt takes the cached pages"
    sim.run()
    (scored,) = sim.submit(toks(14), 2, prompt_logprobs=1)
    chunk = sim.step().batch.chunks[0]
    assert chunk.start == 0 and (chunk.score_from, chunk.score_to) == (0, 13), \
        "a cached position has no logits, so every position but the last is fed and scored"
    sim.run()
    assert sim.scored[scored.seq_id] == list(range(13)) and scored.num_cached_prompt == 0
    assert_completed(sim, [plain, again, scored])


def test_a_scored_prompt_fed_in_chunks_scores_every_position_once():
    sim = Sim(max_batched_tokens=8)
    (a,) = sim.submit(toks(30), 3, prompt_logprobs=0)
    sim.run()
    assert sim.scored[a.seq_id] == list(range(29)), "the last prompt position samples; it scores nothing"
    assert_completed(sim, [a])


def test_only_the_leader_of_n_choices_scores_the_prompt_and_the_others_share_its_pages():
    sim = Sim(max_batched_tokens=64)
    a, b = sim.submit(toks(10), 3, n=2, prompt_logprobs=2)
    sim.run()
    assert sim.scored == {a.seq_id: list(range(9))}
    assert b.num_cached_prompt == 8, "the sibling adopts the leader's cached pages"
    assert_completed(sim, [a, b])


def test_a_preempted_scored_prompt_resumes_without_scoring_a_position_twice_or_skipping_one():
    sim = Sim(full_pages=24, max_num_seqs=4, max_batched_tokens=8)
    seqs = [s for i in range(8) for s in sim.submit(toks(9 + 3 * i, 50 * i), 30 - 2 * i, prompt_logprobs=1)]
    sim.run()
    assert sim.sched.counters.preemptions >= 2
    for s in seqs:
        assert sim.scored[s.seq_id] == list(range(len(s.prompt_ids) - 1)), s.seq_id
    assert_completed(sim, seqs)
