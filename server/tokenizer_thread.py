"""One thread for the request handlers' tokenizer work: rendering chat templates and encoding prompts.

What it is for: a long conversation or a 600 KB prompt takes a second or more to
render and tokenize; done in an async handler it holds the event loop, and every
other request -- /health included -- waits behind it. `off_loop(fn, *args)` runs
such work here instead.

Why one thread and not a pool: a fast tokenizer's encode may switch state on the
shared Rust tokenizer (transformers sets `encode_special_tokens` per call, as
/tokenize's `parse_special` asks), so two encodes at once could tokenize one
request with the other's setting, or fail ("Already borrowed"). Every encode a
request makes -- rendering, the prompt, the reasoning-budget plan and a forced
call's prefix (engine_params) -- therefore runs here, in order; the engine
thread only decodes, which changes no state.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer")


async def off_loop(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, **kwargs)` on the tokenizer thread; its exceptions are raised here."""
    return await asyncio.get_running_loop().run_in_executor(_THREAD, functools.partial(fn, *args, **kwargs))
