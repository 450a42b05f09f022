"""Prompt-lookup drafts (scheduler/ngram_draft.py): what is guessed, and that guesses never change the output.

The tiny random checkpoints rarely repeat themselves, so the engine tests
swap the proposer for an oracle that knows the plain run's output and
guesses it right or, on purpose, wrong: every path -- accepted, rejected,
cut by max_tokens, a stop string or the context -- is then exercised on a
real model and compared token for token with the run that drafts nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import scheduler.batch_scheduler as batch_scheduler
from scheduler.engine import EngineRequest
from scheduler.ngram_draft import propose
from scheduler.sampling_params import SamplingParams
from server.metrics import EngineCollector
from test_engine import integrity, make_engine, owned

PROMPT = [(7 * j) % 500 + 20 for j in range(70)]  # longer than the window (32): windowed layers slide


def test_the_tokens_after_the_latest_longest_earlier_match_are_proposed():
    assert propose([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3], 2) == [8, 5]  # the latest of two matches
    assert propose([4, 2, 3, 7, 9, 2, 3, 6, 4, 2, 3], 3) == [7, 9, 2]  # the 3-token match beats a later 2-token one
    assert propose([5, 1, 2, 6, 1, 2], 5) == [6, 1, 2]  # fewer than k when the text runs out
    assert propose([1, 2, 3, 4, 5, 3], 4) == [4, 5, 3]  # a one-token match is enough by default...
    assert propose([1, 2, 3, 4, 5, 3], 4, min_match=2) == []  # ...and not when asked for two
    assert propose([1, 2, 1, 2], 0) == [] and propose([1], 3) == []


def _run(engine, rid, prompt, **params):
    events = list(engine.submit(EngineRequest(rid, prompt, SamplingParams(**params))))
    return [t for e in events for t in e.token_ids], "".join(e.text for e in events), events[-1]


@pytest.fixture(scope="module")
def windowed(tiny_checkpoint):
    return tiny_checkpoint("qwen3", sliding_window=32, layers=3)


@pytest.fixture(scope="module")
def engines(windowed):
    plain = make_engine(windowed, swa_eviction_interval=1)
    drafting = make_engine(windowed, swa_eviction_interval=1, ngram_draft_tokens=4)
    yield plain, drafting
    plain.shutdown()
    drafting.shutdown()


def _oracle(monkeypatch, prompt: list[int], truth: list[int], wrong_every: int = 3):
    """A proposer that guesses `truth` (the plain run's output) after `prompt`, one guess in `wrong_every`
    off by one, so that steps accept some drafts and reject others."""
    calls = []

    def oracle(ids, k):
        done = len(ids) - len(prompt)
        guess = list(truth[done:done + k])
        calls.append(len(guess))
        if guess and len(calls) % wrong_every == 0:
            guess[-1] += 1
        return guess

    monkeypatch.setattr(batch_scheduler, "propose", oracle)
    return calls


def test_greedy_output_with_drafts_is_token_for_token_the_output_without_and_takes_fewer_steps(engines,
                                                                                               monkeypatch):
    plain, drafting = engines
    truth, text, last = _run(plain, "plain", PROMPT, max_tokens=60, temperature=0, ignore_eos=True)
    calls = _oracle(monkeypatch, PROMPT, truth)
    before = drafting.scheduler.counters.draft_accepted, drafting.counters.steps
    got, got_text, got_last = _run(drafting, "drafted", PROMPT, max_tokens=60, temperature=0, ignore_eos=True,
                                   logprobs=2)
    assert got == truth and got_text == text and got_last.finish_reason == last.finish_reason == "length"
    accepted = drafting.scheduler.counters.draft_accepted - before[0]
    steps = drafting.counters.steps - before[1]
    assert calls and 0 < accepted < sum(calls)  # some guesses kept, some refused
    assert steps < plain.counters.steps  # every accepted draft is a step saved (the plain engine ran one request)
    assert owned(drafting) == 0
    integrity(drafting)
    scraped = {m.name: m.samples[0].value for m in EngineCollector(SimpleNamespace(engine=drafting)).collect()
               if m.type == "counter"}
    c = drafting.scheduler.counters
    assert scraped["anchorage:draft_tokens"] == c.draft_tokens >= sum(calls)
    assert scraped["anchorage:draft_accepted_tokens"] == c.draft_accepted > 0


@pytest.mark.parametrize("cut", ["max_tokens", "stop_string", "context"])
def test_a_run_cut_inside_a_block_of_drafts_ends_where_the_plain_run_ends(windowed, engines, monkeypatch, cut):
    plain, drafting = engines
    truth, text, _ = _run(plain, f"t-{cut}", PROMPT, max_tokens=40, temperature=0, ignore_eos=True)
    params = dict(max_tokens=40, temperature=0, ignore_eos=True)
    if cut == "max_tokens":
        params["max_tokens"] = 13
    elif cut == "stop_string":
        params["stop"] = [text[len(text) // 2:len(text) // 2 + 3]]
    want, want_text, want_last = _run(plain, f"w-{cut}", PROMPT, **params)
    _oracle(monkeypatch, PROMPT, truth, wrong_every=1000)  # every guess right: cuts land inside accepted blocks
    if cut == "context":
        short = make_engine(windowed, swa_eviction_interval=1, ngram_draft_tokens=4, max_model_len=len(PROMPT) + 9)
        try:
            got, got_text, got_last = _run(short, "c", PROMPT, **params)
            assert got == truth[:9] and got_last.finish_reason == "length"
            assert owned(short) == 0
        finally:
            short.shutdown()
        return
    got, got_text, got_last = _run(drafting, f"d-{cut}", PROMPT, **params)
    assert (got, got_text, got_last.finish_reason) == (want, want_text, want_last.finish_reason)
    assert len(got) < 40
    assert owned(drafting) == 0
    integrity(drafting)


def test_no_drafts_are_fed_while_more_sequences_run_than_the_batch_limit(windowed, monkeypatch):
    engine = make_engine(windowed, ngram_draft_tokens=4, ngram_draft_max_batch=1)
    try:
        monkeypatch.setattr(batch_scheduler, "propose", lambda ids, k: [1] * k)
        streams = [engine.submit(EngineRequest(f"r{i}", PROMPT[i:], SamplingParams(max_tokens=12, temperature=0,
                                                                                     ignore_eos=True)))
                   for i in range(3)]
        for s in streams:
            list(s)
        assert engine.scheduler.counters.draft_tokens == 0  # three at once, finishing together: never drafted
        _run(engine, "alone", PROMPT, max_tokens=12, temperature=0, ignore_eos=True)
        # Alone, each of its 11 decodes drafts 4, or fewer near the end: a draft accepted must leave room for
        # the token sampled after it within max_tokens (7 x 4 + 3 + 2 + 1 + 0).
        assert engine.scheduler.counters.draft_tokens == 34
        assert owned(engine) == 0
    finally:
        engine.shutdown()
