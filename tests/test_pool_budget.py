"""The window pool floor (scheduler/pool_budget.py)."""

from __future__ import annotations

import pytest

from scheduler.pool_budget import (
    align_ceil,
    align_down,
    swa_pool_floor,
    swa_pool_shortfall,
    swa_tokens_per_request,
)
from scheduler.window import SlidingRequest, WindowPolicy, decode_slide

WINDOW = 512
PAGE = 64


def test_alignment_rounds_toward_minus_infinity_and_up():
    assert align_down(3519, 64) == 3456
    assert align_down(3520, 64) == 3520
    assert align_down(-1, 64) == -64
    assert align_down(-64, 64) == -64
    assert align_down(-65, 64) == -128
    assert align_ceil(528, 64) == 576
    assert align_ceil(512, 64) == 512
    assert align_ceil(0, 64) == 0


def test_the_per_request_floor_follows_freetokens_formula():
    # align_ceil(512 + 16, 64) + 512 + 128 + 2*64 = 576 + 768 = 1344
    assert swa_tokens_per_request(WINDOW, PAGE, 128, anchors=False) == 1344
    # ... plus 512 + 16 + 128 for the anchor's window.
    assert swa_tokens_per_request(WINDOW, PAGE, 128, anchors=True) == 2000


def test_the_pool_floor_scales_with_the_number_of_running_requests():
    assert swa_pool_floor(8, WINDOW, PAGE, 128, anchors=True) == 16_000
    assert swa_pool_floor(1, WINDOW, PAGE, 128, anchors=False) == 1344


@pytest.mark.parametrize("interval", [1, 64, 128, 300])
def test_the_floor_covers_what_one_anchored_request_actually_holds(interval):
    """Simulate a long anchored generation with the slide applied on its
    cadence and check the per-request floor is never exceeded."""
    pol = WindowPolicy(WINDOW, PAGE, eviction_interval=interval)
    floor = swa_tokens_per_request(WINDOW, PAGE, interval, anchors=True)
    released, anchor, worst = 0, None, 0
    for step, position in enumerate(range(600, 20_000), start=1):
        if position == 3000:
            anchor = position
        decision = decode_slide(
            SlidingRequest(position=position, already_released=released, decode_step=step),
            anchor,
            pol,
            step,
        )
        if decision is not None:
            if decision.drop_anchor:
                anchor = None
            released = max(released, decision.free_to)
        worst = max(worst, position - released)
    assert worst <= floor, f"held {worst} > floor {floor}"


def test_a_pool_at_the_floor_is_accepted():
    floor = swa_pool_floor(4, WINDOW, PAGE, 128, True)
    assert swa_pool_shortfall(floor, 4, WINDOW, PAGE, 128, True) is None
    assert swa_pool_shortfall(floor + 1, 4, WINDOW, PAGE, 128, True) is None


def test_a_pool_below_the_floor_says_the_floor_and_the_flags_to_change():
    message = swa_pool_shortfall(7_000, 8, WINDOW, PAGE, 128, True)
    assert message is not None
    assert "16000" in message
    assert "--swa-pool-tokens" in message
    assert "--max-num-seqs" in message
    # 7000 // 2000 = 3 requests would fit.
    assert "at most 3" in message


def test_a_pool_too_small_for_one_request_does_not_suggest_fewer_requests():
    message = swa_pool_shortfall(100, 2, WINDOW, PAGE, 128, False)
    assert message is not None
    assert "2688" in message
    assert "at most" not in message
    assert "cannot help" in message


def test_a_pool_must_also_take_one_prefill_chunk_or_a_long_prompt_alone_would_wait_forever():
    floor = swa_pool_floor(1, WINDOW, PAGE, 128, True)
    message = swa_pool_shortfall(floor, 1, WINDOW, PAGE, 128, True, chunk=512)
    assert message is not None and f"at least {floor + 512 + 2 * PAGE}" in message
    assert "--max-batched-tokens" in message
    # The running request itself fits: a smaller chunk is the other way out.
    assert swa_pool_shortfall(floor + 300, 1, WINDOW, PAGE, 128, True, chunk=512).endswith(
        f"or lower --max-batched-tokens to at most {300 - 2 * PAGE}.")
    assert swa_pool_shortfall(floor + 512 + 2 * PAGE, 1, WINDOW, PAGE, 128, True, chunk=512) is None
