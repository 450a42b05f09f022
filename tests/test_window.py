"""Window slides and anchors (scheduler/window.py): seed 000's tests, same numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.window import (
    DEFAULT_SWA_EVICTION_INTERVAL,
    SWA_RETAIN_GAP,
    AnchorState,
    SlideDecision,
    SlidingRequest,
    WindowPolicy,
    decode_slide,
    prefill_slide,
    resolve_anchor_token,
)

WINDOW = 512
PAGE = 64


def policy() -> WindowPolicy:
    return WindowPolicy(WINDOW, PAGE)


def request(position: int) -> SlidingRequest:
    return SlidingRequest(position=position, already_released=0, locked_prefix=0, decode_step=1)


def test_the_constants_are_freetokens():
    assert SWA_RETAIN_GAP == 16
    assert DEFAULT_SWA_EVICTION_INTERVAL == 128
    assert policy().eviction_interval == 128


def test_a_zero_eviction_interval_is_clamped_to_one():
    assert WindowPolicy(WINDOW, PAGE, eviction_interval=0).eviction_interval == 1
    assert WindowPolicy(WINDOW, PAGE, eviction_interval=-5).eviction_interval == 1
    # With interval 1 every step is a slide step.
    clamped = WindowPolicy(WINDOW, PAGE, eviction_interval=0)
    assert decode_slide(request(4096), None, clamped, 7) is not None


def test_a_policy_without_a_window_or_page_is_refused():
    with pytest.raises(ValueError, match="page_size"):
        WindowPolicy(WINDOW, 0)
    with pytest.raises(ValueError, match="sliding_window"):
        WindowPolicy(0, PAGE)


def test_an_anchor_token_is_only_resolved_when_it_is_a_single_token():
    assert resolve_anchor_token("<tool_call>", lambda _: [151657]) == 151657
    assert resolve_anchor_token("<tool_call>", lambda _: [27, 14172, 13]) is None, (
        "a multi-token opener gets no anchors"
    )
    assert resolve_anchor_token(None, lambda _: [1]) is None
    assert resolve_anchor_token("", lambda _: [1]) is None
    assert resolve_anchor_token("<tool_call>", lambda _: []) is None


def test_the_opener_is_looked_up_as_the_literal_text():
    seen: list[str] = []

    def encode(text: str) -> list[int]:
        seen.append(text)
        return [9]

    resolve_anchor_token("<|python_tag|>", encode)
    assert seen == ["<|python_tag|>"]


def test_the_first_tool_call_of_a_turn_is_the_anchor():
    state = AnchorState()
    assert not state.observe(5, 9, 100, False), "not the opener"
    assert state.observe(9, 9, 101, False)
    assert state.anchor_len == 101
    # A later call does not move it: the harness rewrites from the first on.
    assert not state.observe(9, 9, 140, False)
    assert state.anchor_len == 101


def test_a_dropped_anchor_is_not_replaced_by_a_later_call_of_the_same_turn():
    # The next turn rejoins at or before the first call whatever came after it: holding a later call's
    # window would cost pool and serve no rejoin.
    state = AnchorState()
    assert state.observe(9, 9, 101, False)
    state.clear()
    assert state.anchor_len is None
    assert not state.observe(9, 9, 300, False)
    assert state.anchor_len is None


def test_a_terminal_token_is_not_an_anchor():
    state = AnchorState()
    assert not state.observe(9, 9, 101, True)
    assert state.anchor_len is None


def test_a_checkpoint_with_no_anchor_token_never_anchors():
    state = AnchorState()
    assert not state.observe(9, None, 101, False)
    assert state.anchor_len is None


def test_the_slide_runs_on_a_cadence_and_never_on_the_first_step():
    req = request(4096)
    assert decode_slide(req, None, policy(), 1) is None
    assert decode_slide(req, None, policy(), 127) is None
    assert decode_slide(req, None, policy(), 128) is not None
    assert decode_slide(req, None, policy(), 256) is not None
    first_step = replace(req, decode_step=0)
    assert decode_slide(first_step, None, policy(), 128) is None, (
        "step 0's state may still be in flight from its prefill"
    )


def test_a_long_generation_releases_everything_outside_its_window():
    decision = decode_slide(request(4096), None, policy(), 128)
    assert decision is not None
    # (4096 - 1) - 512 - 64 = 3519, aligned down to a 64-page.
    assert decision == SlideDecision(free_from=0, free_to=3456, drop_anchor=False)
    assert decision.released == 3456


@pytest.mark.parametrize("position", [0, 1, 63, 100, 500])
def test_a_short_generation_releases_nothing(position):
    decision = decode_slide(request(position), None, policy(), 128)
    assert decision is not None
    assert decision.frees_nothing, f"position {position} released {decision.released}"
    assert decision.released == 0


def test_a_negative_threshold_aligns_down_so_nothing_is_released_even_past_released_state():
    # position 577 -> threshold (576) - 576 = 0; position 576 -> -1, which
    # aligns to -64, never to 0 or up.
    assert decode_slide(request(577), None, policy(), 128).free_to == 0
    assert decode_slide(request(576), None, policy(), 128).free_to == 0
    assert decode_slide(request(641), None, policy(), 128).free_to == 64


def test_the_cache_owned_prefix_is_never_released():
    req = replace(request(4096), locked_prefix=3000)
    decision = decode_slide(req, None, policy(), 128)
    assert decision.free_from == 3000
    assert decision.free_to == 3456


def test_a_locked_prefix_past_the_threshold_releases_nothing():
    req = replace(request(4096), locked_prefix=4000)
    decision = decode_slide(req, None, policy(), 128)
    assert decision.frees_nothing
    assert decision.free_from == 4000


def test_a_slide_never_re_releases_what_it_already_released():
    req = replace(request(4096), already_released=3456)
    decision = decode_slide(req, None, policy(), 128)
    assert decision.frees_nothing


def test_an_anchor_holds_the_state_the_next_turn_will_rejoin_at():
    anchor = 3000
    unanchored = decode_slide(request(3500), None, policy(), 128)
    anchored = decode_slide(request(3500), anchor, policy(), 128)
    assert anchored.free_to < unanchored.free_to, (
        "the anchor must hold state the plain slide would have taken"
    )
    # The window before the anchor stays live.
    assert anchored.free_to <= anchor - WINDOW - SWA_RETAIN_GAP
    assert not anchored.drop_anchor


def test_a_slide_the_anchor_capped_says_what_a_plain_slide_would_have_released():
    # What anchor_reused_tokens is measured by: window state only the anchor kept live.
    anchored = decode_slide(request(3500), 3000, policy(), 128)
    plain = decode_slide(request(3500), None, policy(), 128)
    assert anchored.anchor_kept_to == plain.free_to > anchored.free_to
    assert plain.anchor_kept_to == 0
    assert decode_slide(request(3600), 3000, policy(), 128).anchor_kept_to == 0, "a dropped anchor keeps nothing"
    assert decode_slide(request(300), 200, policy(), 128).anchor_kept_to == 0, "nothing a plain slide would free"


def test_an_anchor_never_makes_the_slide_more_aggressive():
    for position in range(600, 6000, 97):
        plain = decode_slide(request(position), None, policy(), 128)
        for anchor in range(100, position, 211):
            anchored = decode_slide(request(position), anchor, policy(), 128)
            assert anchored.free_to <= plain.free_to, (
                f"position {position} anchor {anchor}: anchored freed further"
            )


def test_a_drifted_anchor_is_dropped_rather_than_held_forever():
    anchor = 3000
    # cap = 3000 - 512 - 16 = 2472. Drop when threshold - cap > 528, i.e.
    # threshold > 3000, i.e. position - 577 > 3000.
    held = decode_slide(request(3576), anchor, policy(), 128)
    assert not held.drop_anchor, "just inside the bound"
    assert not decode_slide(request(3577), anchor, policy(), 128).drop_anchor
    assert decode_slide(request(3578), anchor, policy(), 128).drop_anchor

    dropped = decode_slide(request(3600), anchor, policy(), 128)
    assert dropped.drop_anchor, "just outside it"
    # The slide that drops the anchor is the one that reclaims its state.
    plain = decode_slide(request(3600), None, policy(), 128)
    assert dropped.free_to == plain.free_to


def test_an_anchor_on_a_request_that_has_barely_started_is_kept_and_frees_nothing():
    # threshold = 299 - 512 - 64 = -277 (negative, not clamped); cap =
    # 200 - 528 = -328; -277 - -328 = 51 is well inside the drop bound.
    decision = decode_slide(request(300), 200, policy(), 128)
    assert not decision.drop_anchor
    assert decision.frees_nothing


def test_held_state_stays_bounded_over_a_long_generation():
    pol = policy()
    anchor_at = 3000
    anchor: int | None = None
    released = 0
    bound = 2 * (WINDOW + SWA_RETAIN_GAP) + pol.eviction_interval + 2 * PAGE
    was_anchored = False
    # 100k, the length the acceptance names: the property is a ceiling
    # checked at every step, so a longer run is strictly more evidence.
    for position in range(128, 100_000, 128):
        if position >= anchor_at and anchor is None and not was_anchored:
            anchor = anchor_at
            was_anchored = True
        req = SlidingRequest(position=position, already_released=released)
        decision = decode_slide(req, anchor, pol, 128)
        assert decision is not None
        if decision.drop_anchor:
            anchor = None
        released = max(released, decision.free_to)
        held = position - released
        assert held <= bound, (
            f"position {position} holds {held} tokens, over the {bound} the pool is sized for"
        )
    assert was_anchored
    assert anchor is None, "the anchor was dropped as the cursor ran on"


def test_prefill_slides_on_every_batch():
    decision = prefill_slide(request(4096), policy())
    # 4096 - 512 - 64 = 3520, already page-aligned.
    assert decision.free_to == 3520
    assert not decision.drop_anchor
    assert prefill_slide(request(100), policy()).frees_nothing


def test_prefill_respects_the_locked_prefix_and_what_was_already_released():
    req = replace(request(4096), locked_prefix=1000, already_released=2000)
    decision = prefill_slide(req, policy())
    assert (decision.free_from, decision.free_to) == (2000, 3520)
