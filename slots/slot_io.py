"""Save a slot's KV to an .fslot file and restore one into the pool.

Split by thread on purpose. Reading pages out (`snapshot`) and writing pages
in (`install`) touch the pool and the page tensors, so they run on the engine
thread between steps and are one gather / scatter per layer. Disk I/O
(`write_file`, `read_file`) runs on a worker thread so a multi-hundred-MB
file never stalls decoding.

What a slot file holds here: the slot's page-aligned token prefix; every
full-attention layer's KV for all of it; each windowed layer's KV for its
live suffix only (format v2's `first_held`) -- earlier window positions were
released by slides and are never read again. No pending logits: the next
request recomputes the prefix's last token, as every cache hit does.

Restore checks, in order: size (before reading), the prefix's framing (before
reading the rest), digest (decode),
header against body (decode), identity against the serving checkpoint
(verify), contents against the server (`check_contents`: the digest is a
checksum anyone can recompute, not a signature), and only then allocates pages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slots.atomic_write import atomic_write
from slots.fslot import LayerKV, SlotPayload, read_slot_file, write_to
from slots.identity import SlotIdentity


class RestoreError(Exception):
    """A verified file that still cannot be installed (no room, bad geometry)."""


def _live_suffix_start(window_pages: list, page: int) -> int:
    i = len(window_pages)
    while i > 0 and window_pages[i - 1] is not None:
        i -= 1
    return i * page


def snapshot(slot, runner, page: int) -> SlotPayload | None:
    """Copy the slot's pinned KV into host arrays (engine thread)."""
    if slot.hold is None or not slot.tokens:
        return None
    n = len(slot.tokens)
    held = slot.hold
    layers = []
    for layer, group in enumerate(runner.layer_groups):
        if group == "full":
            k, v = runner.read_layer(layer, held.full_pages, 0, n)
            layers.append(LayerKV(k, v, 0))
        else:
            first = _live_suffix_start(held.window_pages, page)
            k, v = runner.read_layer(layer, held.window_pages, first, n)
            layers.append(LayerKV(k, v, first))
    return SlotPayload(np.asarray(slot.tokens, dtype=np.uint32), np.zeros(0, dtype=np.float32), layers)


def write_file(path: Path, identity: SlotIdentity, payload: SlotPayload) -> int:
    """Atomically write the file (worker thread); returns bytes written."""
    return atomic_write(path, lambda f: write_to(f, identity, payload))


def read_file(path: Path, identity: SlotIdentity, max_bytes: int, vocab_size: int | None = None,
              n_ctx: int | None = None) -> tuple[SlotPayload, int]:
    """Read, decode, verify and check the contents against the server (worker thread). Raises
    SlotFormatError / IdentityMismatch / RestoreError."""
    slot = read_slot_file(path, max_bytes)  # sizes checked on the descriptor it reads
    payload = slot.verify(identity)
    check_contents(payload, vocab_size, n_ctx)
    return payload, slot.file_bytes


def check_contents(payload: SlotPayload, vocab_size: int | None, n_ctx: int | None) -> None:
    """What a well-formed file of the right model may still get wrong: token ids the model has no embedding
    for, more tokens than a request may hold (the next prompt could not even fit), and K/V that are NaN or
    infinite (every later request sharing the prefix would decode garbage from them)."""
    tokens = payload.tokens
    if vocab_size is not None and tokens.size and int(tokens.max()) >= vocab_size:
        raise RestoreError(f"slot file holds token id {int(tokens.max())}, outside the vocabulary (size {vocab_size})")
    held = min(len(tokens), payload.positions)
    if n_ctx is not None and held >= n_ctx:
        raise RestoreError(f"slot file holds {held} tokens, and this server's context is {n_ctx} (--max-model-len)")
    for index, layer in enumerate(payload.layers):
        for name, array in (("K", layer.k), ("V", layer.v)):
            if not _all_finite(array):
                raise RestoreError(f"slot file's layer {index} {name} holds NaN or infinite values")


def _all_finite(array: np.ndarray) -> bool:
    if array.dtype.kind == "u":  # bf16's raw bit patterns: all exponent bits set is inf or NaN
        return not bool(np.any((array & 0x7F80) == 0x7F80))
    return bool(np.isfinite(array).all())


def install(payload: SlotPayload, runner, allocator, window: int | None) -> list[int]:
    """Write a verified payload into fresh pages and the prefix cache (engine thread).

    Returns the page-aligned tokens now cached; the caller pins them to a slot.
    """
    page = allocator.page
    tokens = [int(t) for t in payload.tokens]
    n = (min(len(tokens), payload.positions) // page) * page
    if n == 0:
        raise RestoreError(f"slot file holds {len(tokens)} tokens, fewer than one page ({page}); nothing to restore")
    groups = runner.layer_groups
    for index, (layer, group) in enumerate(zip(payload.layers, groups)):
        # Every later request reads a full-attention layer from position 0: rows missing there would be
        # whatever the fresh pages last held (a crafted file can say so; the digest does not stop it).
        if group == "full" and layer.first_held:
            raise RestoreError(f"the file's layer {index} holds positions from {layer.first_held} on, and it is a "
                               "full-attention layer here, which must hold every position from 0")
    # The window layers' KV we install: the live suffix the file holds, cut to
    # what a continuation reads (the last window plus a page), page aligned.
    win_start = 0
    if "window" in groups:
        held_from = max(layer.first_held for layer, g in zip(payload.layers, groups) if g == "window")
        reads_from = max(0, n - (window or n) - page)
        win_start = max(-(-held_from // page) * page, (reads_from // page) * page)
        if win_start >= n:
            raise RestoreError("the file's windowed layers hold no positions inside the window this restore needs")
        # A later prompt reuses the first m tokens (m a multiple of this page size, at most n) only with its
        # windowed layers' KV from the page holding m - window + 1 on; for m = n that must be installed, or
        # the restore would report tokens that nothing can reuse. A file saved at another page size can hold
        # its window from a position no page here starts at, and then misses the start of one.
        if window and win_start > max(0, n - window + 1) // page * page:
            raise RestoreError(f"the file's windowed layers hold positions from {held_from}, and continuing its {n} "
                               f"tokens at this server's page size ({page}) needs them from "
                               f"{max(0, n - window + 1) // page * page}: restore it into a server with the page "
                               "size it was saved at")
    n_pages = n // page
    needs = {}
    if allocator.full is not None:
        needs["full"] = n_pages
    if allocator.win is not None:
        needs["window"] = n_pages - win_start // page
    # Other slots' pins give way to a restore as they do to a request (oldest first, and only if that
    # makes the room); what running requests hold does not.
    if allocator.release_holds_for(needs) is None:
        raise RestoreError(f"no room in the KV pool for {n} restored tokens beside what running requests "
                           f"hold; raise --kv-cache-tokens (or --swa-pool-tokens) or retry when they finish")
    full_pages = allocator.allocate_pages("full", needs["full"]) if "full" in needs else []
    window_pages = [None] * (win_start // page)
    if "window" in needs:
        window_pages += allocator.allocate_pages("window", needs["window"])
    try:
        for layer, (kv, group) in enumerate(zip(payload.layers, groups)):
            if group == "full":
                runner.write_layer(layer, full_pages, 0, kv.k[:n], kv.v[:n])
            else:
                lo = win_start - kv.first_held
                runner.write_layer(layer, window_pages, win_start, kv.k[lo:n - kv.first_held], kv.v[lo:n - kv.first_held])
        allocator.cache.insert(tokens[:n], full_pages, window_pages)
    finally:
        # The cache took its own references (or kept older equal pages);
        # ours were only for the copy.
        for p in full_pages:
            allocator.full.decref(p)
        for p in window_pages:
            if p is not None:
                allocator.win.decref(p)
    return tokens[:n]
