"""Save a slot's KV to an .fslot file and restore one into the pool.

Saving (`save_file`, a worker thread) writes the file straight out of the
slot's pages, which the engine thread keeps from being freed meanwhile: no
copy of the slot in memory, and a multi-hundred-MB file never stalls
decoding.

Restoring (`restore_file`, a worker thread) streams the file into the pool
piece by piece, with no copy of the whole file in memory: the header and
tokens are read and checked, the engine thread reserves fresh pages
(`slots.slot_install`), each piece of KV is checked and written into them
as it arrives while the engine keeps stepping, and only once the digest
matches does the engine thread put the pages in the prefix cache; on any
refusal it takes them back. The checks keep the format's order
(docs/fslot-format.md): size and prefix before reading the rest, then the
digest, the header against the body, the identity against the serving
checkpoint, and the contents against the server (token ids, length, finite
K and V: the digest is a checksum anyone can recompute, not a signature).
An error found early waits for the digest (`SlotReader.refuse`), so a
corrupt file is reported as corrupt whatever else its corruption breaks.

What a slot file holds here: the slot's page-aligned token prefix; every
full-attention layer's KV for all of it; each windowed layer's KV for the
live suffix the pool still holds (format v2's `first_held`): the last window,
and before it what the anchors kept for the next turn to rejoin at or a slide
has not released yet -- earlier positions were released and are never read
again. No pending logits: the next
request recomputes the prefix's last token, as every cache hit does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.engine import EngineStopped
from slots.atomic_write import atomic_write
from slots.fslot import LayerKV, SlotPayload, write_to
from slots.fslot_layout import SlotFormatError
from slots.fslot_reader import open_slot
from slots.identity import IdentityMismatch, SlotIdentity
from slots.slot_install import InstallPlan, RestoreError, abandon, plan_install, publish, reserve

__all__ = ["RestoreError", "save_file", "write_file", "restore_file", "check_tokens", "check_finite"]


def _live_suffix_start(window_pages: list, page: int) -> int:
    """The first position of the longest run of live window pages ending at the path's end."""
    i = len(window_pages)
    while i > 0 and window_pages[i - 1] is not None:
        i -= 1
    return i * page


def save_file(path: Path, identity: SlotIdentity, runner, on_engine: Callable[[Callable[[Any], Any]], Any],
              slot) -> tuple[int, int] | None:
    """Save the slot's pinned KV as a slot file (worker thread); returns (tokens saved, bytes written), or
    None when the slot holds nothing.

    Streams straight out of the pool: the engine thread takes references on the slot's pages that never
    give way (a pin does, to requests that need the room), and the file is written from views of those
    pages while the engine keeps stepping -- no copy of the slot in memory, and no gather stalling
    decoding. Cached pages are never rewritten while referenced, so the views hold still."""
    held = on_engine(lambda engine: _reference_pinned(slot, engine.scheduler.alloc))
    if held is None:
        return None
    tokens, pages = held
    try:
        n, page = len(tokens), runner.page_size
        layers = []
        for layer, group in enumerate(runner.layer_groups):
            table = pages.full_pages if group == "full" else pages.window_pages
            first = 0 if group == "full" else _live_suffix_start(pages.window_pages, page)
            layers.append(LayerKV(runner.page_views(layer, "K", table, first, n),
                                  runner.page_views(layer, "V", table, first, n), first))
        payload = SlotPayload(np.asarray(tokens, dtype=np.uint32), np.zeros(0, dtype=np.float32), layers)
        return n, write_file(path, identity, payload)
    finally:
        _unless_stopped(on_engine, lambda engine: engine.scheduler.alloc.unreference(pages))


def _reference_pinned(slot, allocator):
    """(tokens, pages) of the slot's pin with references taken on the pages (engine thread), or None.

    The windowed layers' pages are every live one on the pin's path, not only the pin's last window: the
    next turn of a conversation rejoins before its end (an agent's at the turn's first tool call, which the
    anchors keep the window for), and reusing m tokens needs the window from m - window + 1. A file with
    only the last window would restore a prefix no such turn can reuse, where the live server reused it."""
    if slot.hold is None or not slot.tokens:
        return None
    pages = allocator.cache.path_pages(slot.tokens, whole_window=True)
    allocator.reference(pages)
    return list(slot.tokens), pages


def write_file(path: Path, identity: SlotIdentity, payload: SlotPayload) -> int:
    """Atomically write the file (worker thread); returns bytes written."""
    return atomic_write(path, lambda f: write_to(f, identity, payload))


def restore_file(path: Path, identity: SlotIdentity, runner, on_engine: Callable[[Callable[[Any], Any]], Any],
                 pin: Callable[[list[int]], int], *, window: int | None, max_bytes: int,
                 vocab_size: int | None = None, n_ctx: int | None = None) -> tuple[int, int]:
    """Restore a slot file into the pool (worker thread); returns (what `pin` returns, bytes read).

    `on_engine(fn)` runs `fn(engine)` on the engine thread and returns its result; `pin(tokens)` runs
    there once the pages are cached, to hold them for the slot. Raises SlotFormatError, IdentityMismatch or
    RestoreError, and then nothing is left behind in the pool.
    """
    with open_slot(path, max_bytes) as reader:
        try:
            header = reader.header()
            header.identity.compare(identity)
            tokens = np.empty(header.n_prompt, dtype="<u4")
            reader.read_into(memoryview(tokens).cast("B"))
            reader.skip(4 * header.n_logits)  # pending logits: a restore recomputes the last token instead
            check_tokens(tokens, header.positions, vocab_size, n_ctx)
            plan = plan_install(header, tokens.tolist(), runner.layer_groups, runner.page_size, window)
            on_engine(lambda engine: reserve(plan, engine.scheduler.alloc))
        except (SlotFormatError, IdentityMismatch, RestoreError) as error:
            reader.refuse(error)
        published = False
        try:
            try:
                _stream_kv(reader, header, plan, runner)
            except RestoreError as error:
                reader.refuse(error)
            reader.finish()
            result = on_engine(lambda engine: pin(publish(plan, engine.scheduler.alloc)))
            published = True
        finally:
            if not published:
                _unless_stopped(on_engine, lambda engine: abandon(plan, engine.scheduler.alloc))
        return result, reader.file_bytes


def _unless_stopped(on_engine, fn) -> None:
    """Give pages back on the engine thread; an engine that stopped took its pool with it (a slot action
    then ends with what went wrong before, or with its result)."""
    try:
        on_engine(fn)
    except EngineStopped:
        pass


def _stream_kv(reader, header, plan: InstallPlan, runner) -> None:
    """Each layer's K then V: the positions the plan installs read straight into their pages, and checked
    there; the rest only hashed."""
    ident = header.identity
    row_bytes = ident.n_kv_heads * ident.head_dim * np.dtype(ident.kv_dtype.numpy_dtype).itemsize
    for layer in range(ident.n_layers):
        first = header.first_held_of(layer)
        lo, hi = plan.positions_of(layer)  # first <= lo: plan_install installs no position a layer lacks
        for kind in ("K", "V"):
            reader.skip((lo - first) * row_bytes)
            views = runner.page_views(layer, kind, plan.table_of(layer), lo, hi)
            reader.read_into(*(memoryview(view).cast("B") for view in views))
            for view in views:
                check_finite(view, layer, kind)
            reader.skip((header.positions - hi) * row_bytes)


def check_tokens(tokens: np.ndarray, positions: int, vocab_size: int | None, n_ctx: int | None) -> None:
    """What a well-formed file of the right model may still get wrong in its tokens: ids the model has no
    embedding for, and more tokens than a request may hold (the next prompt could not even fit)."""
    if vocab_size is not None and tokens.size and int(tokens.max()) >= vocab_size:
        raise RestoreError(f"slot file holds token id {int(tokens.max())}, outside the vocabulary (size {vocab_size})")
    held = min(len(tokens), positions)
    if n_ctx is not None and held >= n_ctx:
        raise RestoreError(f"slot file holds {held} tokens, and this server's context is {n_ctx} (--max-model-len)")


def check_finite(rows: np.ndarray, layer: int, kind: str) -> None:
    """K or V that are NaN or infinite would make every later request sharing the prefix decode garbage."""
    if rows.dtype.kind == "u":  # bf16's raw bit patterns: all exponent bits set is inf or NaN
        bad = bool(np.any((rows & 0x7F80) == 0x7F80))
    else:
        bad = not bool(np.isfinite(rows).all())
    if bad:
        raise RestoreError(f"slot file's layer {layer} {kind} holds NaN or infinite values")
