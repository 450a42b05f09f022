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

Why two threads: with one, a single huge /tokenize or prompt (3 MB takes
seconds) held every other request's preparation behind it, and with it all new
generation. Two keep one request's tokenizing from stopping the server's;
tokenizing is a small share of a request's work, so more buy little and each
costs a tokenizer's copy in memory.
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


def own_tokenizer(shared: Any) -> Any:
    """On a tokenizer thread, that thread's own copy of `shared` (made on first use); elsewhere `shared`."""
    if not hasattr(_local, "kept") or shared is None:
        return shared
    if _local.kept is None or _local.kept[0] is not shared:  # one server's tokenizer per process, but tests
        _local.kept = (shared, copy.deepcopy(shared))  # run many: only the latest is kept
    return _local.kept[1]


def warm(shared: Any) -> None:
    """Make every tokenizer thread's copy now (at load), so the first requests do not pay for it: a large
    vocabulary's copy takes a moment. Each task holds its thread until all have started, so each thread
    runs exactly one."""
    barrier = threading.Barrier(THREADS)

    def take() -> None:
        barrier.wait(timeout=60)
        own_tokenizer(shared)

    for future in [_POOL.submit(take) for _ in range(THREADS)]:
        future.result()


async def off_loop(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, **kwargs)` on a tokenizer thread; its exceptions are raised here. `fn` reads the
    tokenizer as `state.tokenizer` there, not a tokenizer fetched beforehand on the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))
