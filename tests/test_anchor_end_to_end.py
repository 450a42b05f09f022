"""Anchors end to end on a tiny windowed checkpoint (issue 4 acceptance).

Turn 1 generates a long stretch, then the tool-call opener, then a call body,
then stops. Turn 2's prompt agrees with turn 1 up to and including the opener
and then diverges (the harness rewrote the call and appended a result).

The model runs for real -- every KV page is computed, slid, cached and
reused by the real engine -- but turn 1's tokens are chosen by a scripted
sampler, so the opener lands exactly where the test wants it. Turn 2 then
samples greedily for real, and must match a fresh engine that never saw
turn 1: reusing the anchor's window must not change a single token.
"""

from __future__ import annotations

import pytest

from models import sampler as real_sampler
from models.sampler import Sampled
from scheduler.engine import EngineRequest
from scheduler.sampling_params import SamplingParams
from server.runtime import build_runtime
from server.settings import ServeSettings

WINDOW, PAGE = 32, 16


class ScriptedSampler:
    """Picks the scripted token for a prompt; the model's logits are ignored."""

    def __init__(self, scripts: dict[tuple[int, ...], list[int]]):
        self.scripts = scripts

    new_state = staticmethod(real_sampler.new_state)

    def sample(self, logits, states, histories):
        return [Sampled(self.scripts[tuple(prompt)][len(output)]) for prompt, output in histories]


def make_engine(path, anchors: bool):
    s = ServeSettings(model=path, dtype="float32", page_size=PAGE, anchors=anchors, swa_eviction_interval=4,
                      max_num_seqs=4, max_batched_tokens=64)
    info, engine, tok, _, _ = build_runtime(s)
    engine.start()
    return info, engine, tok


def turn(engine, rid, prompt, max_tokens, sampler=None):
    engine.sampler = sampler or real_sampler
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    evs = list(engine.submit(EngineRequest(rid, prompt, params)))
    engine.sampler = real_sampler
    return [t for e in evs for t in e.token_ids], evs[-1].stats


def two_turns(path, anchors: bool):
    info, engine, tok = make_engine(path, anchors)
    try:
        opener = info.anchor_token
        assert opener is not None, info.anchor_line
        prompt1 = [(11 * j) % 300 + 40 for j in range(40)]
        filler = [(7 * j) % 300 + 40 for j in range(150)]
        call_body = [(5 * j) % 300 + 40 for j in range(24)]
        script = filler + [opener] + call_body
        out1, _ = turn(engine, "t1", prompt1, len(script), ScriptedSampler({tuple(prompt1): script}))
        assert out1 == script
        anchor = len(prompt1) + len(filler) + 1  # sequence length including the opener
        assert engine.scheduler.counters.anchors_set == (1 if anchors else 0)
        assert engine.scheduler.counters.anchors_dropped == 0
        # The harness rewrites the call and appends the tool's result.
        prompt2 = prompt1 + filler + [opener] + [(3 * j) % 300 + 41 for j in range(30)]
        out2, stats2 = turn(engine, "t2", prompt2, 10)
        reused_at_anchor = engine.scheduler.counters.anchor_reused_tokens
        assert reused_at_anchor == (stats2.cached_tokens if anchors else 0)
        return anchor, stats2.cached_tokens, out2, prompt2
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def windowed(tiny_checkpoint):
    return tiny_checkpoint("qwen3", sliding_window=WINDOW, layers=3)


def test_a_repeated_prompt_is_no_reuse_an_anchor_made_though_the_anchor_held_its_turns_window(windowed):
    # The prompt's own window pages were cached when its prefill finished: no anchor kept them. The turn
    # calls a tool 50 tokens in and goes on for 30, so the anchor does cap slides (and marks what it kept).
    info, engine, _ = make_engine(windowed, anchors=True)
    try:
        prompt = [(11 * j) % 300 + 40 for j in range(100)]
        filler = [(7 * j) % 300 + 40 for j in range(49)]
        script = filler + [info.anchor_token] + [(5 * j) % 300 + 40 for j in range(30)]
        turn(engine, "a", prompt, len(script), ScriptedSampler({tuple(prompt): script}))
        assert engine.scheduler.counters.anchors_set == 1
        _, stats = turn(engine, "b", prompt, 4)
        assert stats.cached_tokens == 96 and engine.scheduler.counters.anchor_reused_tokens == 0
        # The next turn, rejoining just after the call, is reuse the anchor made.
        _, stats = turn(engine, "c", prompt + filler + [info.anchor_token] + [1, 2, 3], 4)
        assert engine.scheduler.counters.anchor_reused_tokens == stats.cached_tokens > 96
    finally:
        engine.shutdown()


def test_with_anchors_off_the_startup_line_says_so(windowed):
    info, engine, _ = make_engine(windowed, anchors=False)
    engine.shutdown()
    assert info.anchor_line.startswith("anchors: off (--no-anchors)") and info.anchor_token is not None


def test_the_next_turn_rejoins_at_the_anchor_only_with_anchors_on(windowed):
    anchor, cached_on, out_on, prompt2 = two_turns(windowed, anchors=True)
    _, cached_off, out_off, _ = two_turns(windowed, anchors=False)
    assert cached_on >= anchor - PAGE, f"anchors on reused {cached_on}, anchor at {anchor}"
    # Without the anchor only the window before turn 1's prompt end survives.
    assert cached_off <= 40 + PAGE < cached_on - 4 * PAGE, (cached_off, cached_on)
    # Reused KV is the same KV: turn 2 decodes the same tokens as a cold engine.
    _, cold, _ = make_engine(windowed, anchors=True)
    try:
        fresh, stats = turn(cold, "cold", prompt2, 10)
    finally:
        cold.shutdown()
    assert stats.cached_tokens == 0
    assert out_on == fresh and out_off == fresh
