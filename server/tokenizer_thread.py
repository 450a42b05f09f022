"""Threads for the request handlers' tokenizer work: rendering chat templates and encoding prompts.

What it is for: a long conversation or a 600 KB prompt takes a second or more to
render and tokenize; done in an async handler it holds the event loop, and every
other request -- /health included -- waits behind it. `off_loop(fn, *args)` runs
such work here instead.

Why each thread has its own tokenizer: a fast tokenizer's encode may switch state
on its Rust tokenizer (transformers sets `encode_special_tokens` per call, as
/tokenize's `parse_special` asks), so two encodes at once on one tokenizer could
tokenize one request with the other's setting, or fail ("Already borrowed").
`own_tokenizer(shared)` gives each tokenizer thread a deep copy, made on its first
use, so the threads never share one; every other thread (the engine's, which only
decodes, and the event loop's) uses the shared tokenizer. `ServerState.tokenizer`
resolves through it, so code run here just reads `state.tokenizer`.

Why two threads, and a lane of one for large texts: with one thread, a single
huge /tokenize or prompt (3 MB takes seconds) held every other request's
preparation behind it, and with it all new generation. Two were not enough
either: two clients sending 12 MB prompts (under the body limit, far over the
context, which only tokenizing can tell) held both for 14-25 s, and a "hi" sent
meanwhile waited 21.7 s (measured, /work/experiments/s22/big_prompts.py). So a
request whose client text passes `LARGE_TEXT` characters is prepared on a lane
of its own (`off_loop(..., text_size=n)`): large texts queue behind each other,
never in front of the rest. Tokenizing is a small share of an ordinary
request's work, so more threads buy little, and each costs a tokenizer's copy
in memory.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

THREADS = 2
_local = threading.local()


def _mark_tokenizer_thread() -> None:
    _local.kept = None  # (shared tokenizer, this thread's copy of it)


_POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="tokenizer", initializer=_mark_tokenizer_thread)
# Characters of client text from which a request is prepared on the large-text lane: about 0.3 s of
# tokenizing, far past what ordinary turns send, and under a long-context conversation's size.
LARGE_TEXT = 256 * 1024
_LARGE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer-large", initializer=_mark_tokenizer_thread)


def own_tokenizer(shared: Any) -> Any:
    """On a tokenizer thread, that thread's own copy of `shared` (made on first use); elsewhere `shared`."""
    if not hasattr(_local, "kept") or shared is None:
        return shared
    if _local.kept is None or _local.kept[0] is not shared:  # one server's tokenizer per process, but tests
        _local.kept = (shared, copy.deepcopy(shared))  # run many: only the latest is kept
    return _local.kept[1]


def warm(shared: Any) -> None:
    """Make every tokenizer thread's copy now (at load), so the first requests do not pay for it: a large
    vocabulary's copy takes a moment. Each task holds its pool thread until all have started, so each
    thread runs exactly one; the large-text lane's one thread makes its own too."""
    barrier = threading.Barrier(THREADS)

    def take() -> None:
        barrier.wait(timeout=60)
        own_tokenizer(shared)

    for future in [*[_POOL.submit(take) for _ in range(THREADS)], _LARGE.submit(own_tokenizer, shared)]:
        future.result()


async def off_loop(fn: Callable[..., T], *args, text_size: int = 0, **kwargs) -> T:
    """`fn(*args, **kwargs)` on a tokenizer thread; its exceptions are raised here. `fn` reads the
    tokenizer as `state.tokenizer` there, not a tokenizer fetched beforehand on the event loop.
    `text_size`: characters of client text the work reads; from LARGE_TEXT on, it runs on the large lane."""
    pool = _LARGE if text_size >= LARGE_TEXT else _POOL
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))
