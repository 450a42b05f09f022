"""The engine on a real (tiny) checkpoint: batching, caching, aborts, preemption (issue 3)."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler.engine import EngineRequest
from scheduler.sampling_params import SamplingParams
from server.runtime import build_runtime
from server.settings import ServeSettings


def make_engine(path, **overrides):
    options = dict(model=path, dtype="float32", max_num_seqs=16, max_batched_tokens=64)
    settings = ServeSettings(**{**options, **overrides})
    info, engine, tokenizer, runner, _ = build_runtime(settings)
    engine.start()
    return engine


def run(engine, rid, prompt, **params):
    evs = list(engine.submit(EngineRequest(rid, prompt, SamplingParams(**params))))
    last = evs[-1]
    return [t for e in evs for t in e.token_ids], last


def owned(engine) -> int:
    return engine.call(lambda e: sum(u.owned for u in e.scheduler.alloc.pool.usage())).result(10)


def integrity(engine) -> None:
    engine.call(lambda e: e.scheduler.alloc.pool.check_integrity()).result(10)


def prompts(n: int, vocab: int = 600) -> list[list[int]]:
    return [[(7 * i + 13 * j) % (vocab - 20) + 10 for j in range(5 + 11 * i)] for i in range(n)]


@pytest.fixture(scope="module")
def qwen3(tiny_checkpoint):
    return tiny_checkpoint("qwen3", sliding_window=32, layers=3)


@pytest.fixture(scope="module")
def engine(qwen3):
    e = make_engine(qwen3)
    yield e
    e.shutdown()


def test_sixteen_concurrent_requests_give_exactly_the_tokens_each_gives_alone(engine):
    ps = prompts(16)
    lengths = [3 + (5 * i) % 29 for i in range(16)]
    alone = [run(engine, f"alone{i}", p, max_tokens=n, temperature=0, ignore_eos=True)[0] for i, (p, n) in
             enumerate(zip(ps, lengths))]
    together: dict[int, list[int]] = {}

    def worker(i):
        together[i] = run(engine, f"conc{i}", ps[i], max_tokens=lengths[i], temperature=0, ignore_eos=True)[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(16):
        assert len(alone[i]) == lengths[i]
        assert together[i] == alone[i], f"request {i} differs under concurrency"
    assert owned(engine) == 0
    integrity(engine)


def test_a_seeded_sampled_request_is_reproducible(engine):
    p = prompts(3)[2]
    a, _ = run(engine, "s1", p, max_tokens=24, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    b, _ = run(engine, "s2", p, max_tokens=24, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    c, _ = run(engine, "s3", p, max_tokens=24, temperature=1.0, top_p=0.9, seed=8, ignore_eos=True)
    assert a == b
    assert a != c, "a different seed should sample differently"


def test_a_request_sharing_a_200_token_prefix_computes_only_its_new_tokens(engine):
    base = [(31 * j) % 500 + 20 for j in range(200)]
    run(engine, "first", base + [7, 8, 9], max_tokens=4, temperature=0)
    hits_before = engine.scheduler.counters.cache_hit_tokens
    _, last = run(engine, "second", base + [11, 12, 13, 14], max_tokens=4, temperature=0)
    # 200 shared tokens, page 16: twelve whole pages are reusable.
    assert last.stats.cached_tokens == 192
    assert engine.scheduler.counters.cache_hit_tokens - hits_before == 192
    assert last.stats.prompt_tokens - last.stats.cached_tokens == 12


def _wait(engine, rid, pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.call(lambda e: any(pred(s) for s in e._by_request.get(rid, []))).result(10):
            return True
        time.sleep(0.01)
    return False


def test_aborting_mid_prefill_and_mid_decode_returns_every_page(qwen3):
    engine = make_engine(qwen3, max_batched_tokens=16)
    # 20 ms a step: the 25 chunks of prefill last half a second, so the poll below sees it midway even on a
    # loaded machine (unslowed, prefill took about 50 ms, and a stalled test thread could miss it).
    engine.runner = SlowRunner(engine.runner, 0.02)
    try:
        long_prompt = [(17 * j) % 500 + 20 for j in range(400)]
        stream = engine.submit(EngineRequest("pre", long_prompt, SamplingParams(max_tokens=50, temperature=0)))
        assert _wait(engine, "pre", lambda s: 0 < s.num_computed < len(long_prompt)), "never seen mid-prefill"
        engine.abort("pre")
        assert [e.finish_reason for e in stream][-1] == "abort"

        stream = engine.submit(EngineRequest("dec", prompts(4)[3], SamplingParams(max_tokens=500, temperature=0,
                                                                                  ignore_eos=True)))
        assert _wait(engine, "dec", lambda s: len(s.output_ids) >= 5), "never seen mid-decode"
        engine.abort("dec")
        evs = list(stream)
        assert evs[-1].finish_reason == "abort" and sum(len(e.token_ids) for e in evs) < 500
        assert owned(engine) == 0, "an aborted request kept pages"
        integrity(engine)
        # Everything not owned is free or merely cached (evictable): nothing leaked.
        usage = engine.call(lambda e: e.scheduler.alloc.pool.usage()).result(10)
        assert all(u.free + u.cached == u.total for u in usage)
    finally:
        engine.shutdown()


def _ended_after_30_tokens(engine, rid, prompt, end) -> tuple[list[int], str]:
    """Stream a long request and call `end()` once 30 tokens are out; (tokens received, finish reason)."""
    stream = engine.submit(EngineRequest(rid, prompt, SamplingParams(max_tokens=500, temperature=0, ignore_eos=True)))
    got: list[int] = []
    for ev in stream:
        got += ev.token_ids
        if len(got) >= 30 and ev.finish_reason is None:
            end()
    return got, ev.finish_reason


def test_what_a_cancelled_request_computed_is_cached_for_the_clients_next_turn(qwen3):
    engine = make_engine(qwen3)
    engine.runner = SlowRunner(engine.runner, 0.02)
    try:
        prompt = [(29 * j) % 500 + 20 for j in range(40)]
        got, reason = _ended_after_30_tokens(engine, "gone", prompt, lambda: engine.abort("gone"))  # client hung up
        assert reason == "abort" and len(got) < 500
        assert owned(engine) == 0, "the cache holds the cancelled KV; the request itself keeps no page"
        _, last = run(engine, "again", prompt + got + [5, 6], max_tokens=2, temperature=0)
        # 40 prompt tokens and at least 30 generated were computed: 64 of them are whole pages.
        assert last.stats.cached_tokens >= 64, "the cancelled request's KV was dropped, not cached"
        integrity(engine)
    finally:
        engine.shutdown()


def test_a_failed_request_caches_nothing_beyond_its_prompt(qwen3):
    engine = make_engine(qwen3)
    try:
        prompt = [(37 * j) % 500 + 20 for j in range(20)]
        def fail():
            engine.call(lambda e: [e._fail(seq, "injected") for seq in e._by_request.get("bad", [])]).result(10)

        got, reason = _ended_after_30_tokens(engine, "bad", prompt, fail)
        assert reason == "error"
        _, last = run(engine, "again", prompt + got + [5, 6], max_tokens=2, temperature=0)
        assert last.stats.cached_tokens == 16, "only the prompt's whole page, cached after its prefill"
    finally:
        engine.shutdown()


def test_a_pool_too_small_for_the_load_still_completes_every_request_by_preempting(qwen3, engine):
    ps = prompts(8)
    reference = [run(engine, f"ref{i}", p, max_tokens=40, temperature=0, ignore_eos=True)[0] for i, p in enumerate(ps)]
    small = make_engine(qwen3, kv_cache_tokens=160, max_model_len=128, max_num_seqs=8, parallel=1)
    try:
        results: dict[int, list[int]] = {}

        def worker(i):
            results[i] = run(small, f"small{i}", ps[i], max_tokens=40, temperature=0, ignore_eos=True)[0]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert small.scheduler.counters.preemptions > 0, "the pool was meant to be too small"
        for i in range(8):
            assert results[i] == reference[i], f"request {i} changed after preemption"
        assert owned(small) == 0
        integrity(small)
    finally:
        small.shutdown()


def test_a_failing_end_of_sequence_callback_still_lets_the_final_event_out_and_the_pages_go_back(engine):
    def broken(seq):
        raise RuntimeError("a slot bookkeeping bug")

    before = owned(engine)
    engine.on_end.append(broken)
    try:
        tokens, last = run(engine, "callback", prompts(1)[0], max_tokens=4, temperature=0, ignore_eos=True)
    finally:
        engine.on_end.remove(broken)
    assert last.finish_reason == "length" and len(tokens) == 4  # the stream ended: no client waits forever
    assert owned(engine) == before
    integrity(engine)


def test_a_request_the_engine_fails_to_take_in_ends_in_an_error_and_the_engine_serves_on(engine):
    real = engine.processor_factory

    def factory(seq):
        if seq.request_id == "cannot-build" and seq.index == 1:  # the second choice: the first was already built
            raise RuntimeError("injected failure building a processor")
        return real(seq)

    before = owned(engine)
    engine.processor_factory = factory
    events: list = []
    stream = engine.submit(EngineRequest("cannot-build", prompts(1)[0], SamplingParams(max_tokens=3, n=2, temperature=0)))
    reader = threading.Thread(target=lambda: events.extend(stream), daemon=True)
    try:
        reader.start()
        reader.join(30)
    finally:
        engine.processor_factory = real
    assert not reader.is_alive(), "the request got no final event"
    assert sorted(e.index for e in events if e.finish_reason == "error") == [0, 1]
    assert all("taking in the request" in e.error for e in events)
    tokens, last = run(engine, "after", prompts(1)[0], max_tokens=3, temperature=0, ignore_eos=True)
    assert last.finish_reason == "length" and len(tokens) == 3, "the engine thread is alive"
    assert owned(engine) == before and engine.num_running == 0 and engine.num_waiting == 0
    integrity(engine)


class FailingRunner:
    """The engine's runner, except that a forward step fails whenever `fails(batch)` says so."""

    def __init__(self, real, fails) -> None:
        self.real, self.fails = real, fails

    def step(self, batch):
        if self.fails(batch):
            raise RuntimeError("injected forward failure")
        return self.real.step(batch)

    def __getattr__(self, name):
        return getattr(self.real, name)


class SlowRunner(FailingRunner):
    """The engine's runner, `delay` seconds slower a forward step."""

    def __init__(self, real, delay: float) -> None:
        super().__init__(real, lambda batch: time.sleep(delay) and False)


def _together(engine, requests: dict[str, list[int]], n_tokens: int) -> dict:
    """Submit every request before reading any, so they share steps; rid -> (tokens, last event)."""
    streams = {rid: engine.submit(EngineRequest(rid, p, SamplingParams(max_tokens=n_tokens, temperature=0,
                                                                        ignore_eos=True)))
               for rid, p in requests.items()}
    out = {}
    for rid, stream in streams.items():
        events = list(stream)
        out[rid] = ([t for e in events for t in e.token_ids], events[-1])
    return out


def test_a_request_whose_forward_step_fails_ends_alone_and_the_others_finish_as_they_would_alone(engine):
    poison = 599  # in no prompt of prompts(): only the poisoned request's chunks carry it
    ps = prompts(4)
    alone = [run(engine, f"alone-f{i}", p, max_tokens=6, temperature=0, ignore_eos=True)[0] for i, p in enumerate(ps)]
    before = engine.counters.step_errors
    engine.runner = FailingRunner(engine.runner, lambda batch: any(poison in c.token_ids for c in batch.chunks))
    try:
        got = _together(engine, {**{f"ok{i}": p for i, p in enumerate(ps)}, "poisoned": [poison] + ps[1]}, 6)
    finally:
        engine.runner = engine.runner.real
    tokens, last = got["poisoned"]
    assert last.finish_reason == "error" and "forward step" in last.error
    for i in range(4):
        assert got[f"ok{i}"][1].finish_reason == "length"
        assert got[f"ok{i}"][0] == alone[i], f"request {i} was hurt by another request's failing forward step"
    assert engine.counters.step_errors >= before + 2, "the batch failed, then the poisoned sequence alone"
    assert owned(engine) == 0
    integrity(engine)


def test_a_step_that_fails_once_is_retried_and_every_request_in_it_completes(engine):
    ps = prompts(3)
    alone = [run(engine, f"alone-t{i}", p, max_tokens=5, temperature=0, ignore_eos=True)[0] for i, p in enumerate(ps)]
    failed: list[int] = []

    def once(batch) -> bool:  # the first batch of several sequences fails (say, out of memory), nothing after
        if len(batch.chunks) > 1 and not failed:
            failed.append(len(batch.chunks))
            return True
        return False

    engine.runner = FailingRunner(engine.runner, once)
    try:
        got = _together(engine, {f"t{i}": p for i, p in enumerate(ps)}, 5)
    finally:
        engine.runner = engine.runner.real
    assert failed, "no step ran several sequences at once"
    for i in range(3):
        assert got[f"t{i}"] == (alone[i], got[f"t{i}"][1]) and got[f"t{i}"][1].finish_reason == "length"
    assert owned(engine) == 0
    integrity(engine)


def test_a_call_to_a_stopped_engine_fails_at_once_rather_than_waiting_forever(qwen3):
    from concurrent.futures import Future

    from scheduler.engine import EngineStopped

    engine = make_engine(qwen3)
    running, release = threading.Event(), threading.Event()
    blocked = engine.call(lambda e: running.set() or release.wait(10))  # holds the engine thread
    assert running.wait(10)
    queued = engine.call(lambda e: "ran")  # queued behind it when the engine is told to stop
    stopper = threading.Thread(target=engine.shutdown)
    stopper.start()
    time.sleep(0.2)
    release.set()
    stopper.join(10)
    assert blocked.result(1) is True and queued.result(1) == "ran"  # drained before the loop looked again
    with pytest.raises(EngineStopped):
        engine.call(lambda e: "late").result(1)
    stranded = Future()
    engine._commands.put(("call", lambda e: "stranded", stranded))
    engine._fail_calls()  # what the loop does with calls still queued as it ends
    with pytest.raises(EngineStopped):
        stranded.result(1)
