"""How big the sliding-window KV pool must be: a floor, not a target.

A windowed layer never needs more than its window, but the *pool* behind
it has to hold every running request's window at once, plus what
accumulates between two slides, plus the extra window an anchor keeps
alive (see `scheduler/window.py`). Below that floor the scheduler can
admit requests it cannot serve and deadlocks under concurrency, so
startup refuses such a configuration -- with a message that says what
the floor is and which flag to change (`swa_pool_shortfall`).

Not for: deciding *which* pages to release (that is `window.py`), or how
many pages the machine can afford (that is the pool's own sizing).

Ported from seed 000's `policy::pool_budget` (FreeToken's window-pool
sizing); the per-request formula is facts.md section 4.
"""

from __future__ import annotations

# Tokens kept live in front of an anchor's window. It covers chat
# templates whose generation prompt injects tokens that vanish when the
# client drops the reasoning (Qwen's `<think>\n`), so the next turn's
# prompt can sit a few tokens earlier than this turn's cursor did.
SWA_RETAIN_GAP = 16

# Decode steps between two window slides. Sliding on every step would
# cost one pool operation per token; the pool floor pays for the tokens
# that pile up in between instead.
DEFAULT_SWA_EVICTION_INTERVAL = 128

POOL_FLAG = "--swa-pool-tokens"
SEQS_FLAG = "--max-num-seqs"


def align_down(value: int, page: int) -> int:
    """The largest multiple of `page` not above `value`, negatives included.

    Floor division rounds toward minus infinity, so a negative threshold
    aligns *further* negative -- the same answer as the seed's explicit
    `t - (page + t % page) % page` for Rust's truncating `%`.
    """
    return (value // page) * page


def align_ceil(value: int, page: int) -> int:
    """The smallest multiple of `page` not below `value`."""
    return -((-value) // page) * page


def swa_tokens_per_request(
    window: int, page: int, interval: int = DEFAULT_SWA_EVICTION_INTERVAL, anchors: bool = True
) -> int:
    """Window tokens one running request can hold at its worst moment.

    `align_ceil(window + gap, page)` is the window itself rounded to whole
    pages, the second `window` covers the slide threshold trailing the
    cursor by `window + page`, `interval` is what decodes between slides,
    and `2 * page` the partial pages at either end. With anchors on, one
    more `window + gap + interval`: the anchor's window, held until the
    cursor drifts past the drop bound (`window.decode_slide`).
    """
    per_request = align_ceil(window + SWA_RETAIN_GAP, page) + window + interval + 2 * page
    if anchors:
        per_request += window + SWA_RETAIN_GAP + interval
    return per_request


def swa_pool_floor(
    max_num_seqs: int,
    window: int,
    page: int,
    interval: int = DEFAULT_SWA_EVICTION_INTERVAL,
    anchors: bool = True,
) -> int:
    """The smallest window pool, in tokens, that serves `max_num_seqs` at once."""
    return max_num_seqs * swa_tokens_per_request(window, page, interval, anchors)


def swa_pool_shortfall(
    pool_tokens: int,
    max_num_seqs: int,
    window: int,
    page: int,
    interval: int = DEFAULT_SWA_EVICTION_INTERVAL,
    anchors: bool = True,
    chunk: int = 0,
) -> str | None:
    """Why a configured window pool is too small, or None when it is enough.

    Besides the running requests' floor, the pool must take one prefill
    chunk of `chunk` tokens (`--max-batched-tokens`) and two partial pages
    on top: a prompt's chunk needs window pages for all of its tokens before
    the prefill slide releases them, and with the pool at the bare floor and
    nothing running to free pages, a long prompt's first chunk would wait
    for room forever. The message is meant for a startup error as is: it
    gives the floor, how it was computed, and the two flags that fix it.
    """
    per_request = swa_tokens_per_request(window, page, interval, anchors)
    prefill = chunk + 2 * page if chunk else 0
    floor = max_num_seqs * per_request + prefill
    if pool_tokens >= floor:
        return None
    fits = (pool_tokens - prefill) // per_request
    chunk_room = pool_tokens - max_num_seqs * per_request - 2 * page  # the largest chunk that would fit
    if fits >= 1:
        alternative = f", or lower {SEQS_FLAG} to at most {fits}"
    elif chunk and chunk_room >= 1:
        alternative = f", or lower --max-batched-tokens to at most {chunk_room}"
    else:
        alternative = f"; it does not hold even one request, so lowering {SEQS_FLAG} cannot help"
    chunk_part = f" + one prefill chunk of {chunk} (--max-batched-tokens) and two pages" if chunk else ""
    return (
        f"the sliding-window KV pool holds {pool_tokens} tokens, below the floor of {floor} "
        f"({SEQS_FLAG} {max_num_seqs} x {per_request} tokens per request for window {window}, "
        f"page {page}, eviction interval {interval}, anchors {'on' if anchors else 'off'}{chunk_part}); "
        f"below it requests deadlock waiting for window pages. "
        f"Raise {POOL_FLAG} to at least {floor}{alternative}."
    )
