"""Data-parallel training of the demo model: processes of one thread each, every one taking a share of a
batch's rows, their gradients added before each optimiser step.

What it is for: `train.py` runs its loop on `workers` ranks (`run`); each rank trains `rows_of(batch)`
and `all_reduce` adds the ranks' gradients (and a few numbers the ranks must agree on) so every rank
takes the same step.

Why: the demo model's matrices (hidden 192) are too small for two threads to share one step well:
measured on two cores, a step of 8 agent rows took 0.50 s on two threads, while a step of 4 rows took
0.30 s on one. Two processes, each with half the rows on its own core, run the same step in about
0.3 s plus the gradient exchange (7 MB over loopback), so the same 20 minutes hold more steps.

Why the result is the whole batch's step: each rank's loss is its rows' summed token loss divided by
the whole batch's count of trained tokens (`trained_tokens`), so the ranks' gradients add up to the
gradient of the batch's mean loss. A rank's rows are trimmed to their own width, which changes no real
token: rows are right-padded and attention is causal. With two ranks the sum is the same whichever
order gloo adds in (floating-point addition is commutative), so a seed still gives the same weights.

Not for: anything but the demo's CPU training; the server never imports it.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from models.demo.dataset import IGNORE, Batch

T = TypeVar("T")

# A rank waits at most this long for the others (rank 0 alone runs the held-out checks and the save).
TIMEOUT = datetime.timedelta(minutes=10)


def rows_of(batch: Batch, rank: int, world: int, pad: int) -> Batch:
    """Rank `rank`'s rows of `batch`: every `world`-th row from `rank` (so each rank gets long and short
    rows alike; batches are sorted by length), trimmed to the longest of them."""
    ids, labels = batch.ids[rank::world], batch.labels[rank::world]  # [rows / world, len]
    used = ((ids != pad) | (labels != IGNORE)).any(0).nonzero()
    width = int(used.max()) + 1 if len(used) else 1
    return Batch(batch.prefix_ids, ids[:, :width].contiguous(), labels[:, :width].contiguous())


def trained_tokens(batch: Batch) -> int:
    return int((batch.labels != IGNORE).sum())


def all_reduce(params: list[torch.nn.Parameter], numbers: list[float]) -> list[float]:
    """Add every rank's gradients of `params` (in place) and its `numbers`; returns the summed numbers.

    One flat buffer, so the exchange is one message rather than one per parameter. A rank with no
    gradient for a parameter (no rows in this batch) adds zeros; a parameter no rank has a gradient
    for keeps none, as it would in one process (so AdamW leaves it alone).
    """
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    had = [float(p.grad is not None) for p in params]
    # float64 numbers would make torch.cat promote the gradients too: the numbers go at the gradients' dtype.
    dtype = grads[0].dtype if grads else torch.float64
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor(had + numbers, dtype=dtype)])
    dist.all_reduce(flat)
    offset = 0
    for p, g, anyone in zip(params, grads, flat[-len(had) - len(numbers):].tolist()):
        n = g.numel()
        if not anyone:
            p.grad = None
        elif p.grad is None:
            p.grad = flat[offset:offset + n].view_as(p).clone()
        else:
            p.grad.copy_(flat[offset:offset + n].view_as(p))
        offset += n
    return flat[offset + len(had):].tolist()


def run(world: int, fit: Callable[[int], T]) -> T:
    """`fit(rank)` on `world` ranks: rank 0 in this process, the others in forked children (which inherit
    the prepared data and the model, so nothing is pickled); returns rank 0's result.

    Fork, not spawn: the children need the corpus and the model exactly as this process built them, and
    a spawned child would rebuild or unpickle them. The caller must not have started OpenMP threads
    (train.py runs every rank, and its preparation, on one thread).
    """
    if world == 1:
        return fit(0)
    store = tempfile.mkdtemp(prefix="demo-dp-")
    path = os.path.join(store, "store")
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_child, args=(path, rank, world, fit), daemon=True)
                for rank in range(1, world)]
    for child in children:
        child.start()
    try:
        _join_group(path, 0, world)
        try:
            result = fit(0)
        finally:
            dist.destroy_process_group()
    finally:
        for child in children:
            child.join(timeout=TIMEOUT.total_seconds())
            if child.exitcode is None:  # hung: it would outlive the run
                child.terminate()
                child.join()
        shutil.rmtree(store, ignore_errors=True)
    failed = [c.exitcode for c in children if c.exitcode != 0]
    if failed:
        raise RuntimeError(f"a training rank failed (exit codes {failed})")
    return result


def _child(path: str, rank: int, world: int, fit: Callable[[int], object]) -> None:
    _join_group(path, rank, world)
    try:
        fit(rank)
    finally:
        dist.destroy_process_group()


def _join_group(path: str, rank: int, world: int) -> None:
    # Gloo finds its address through the host name, which a fresh machine or container may not resolve;
    # the ranks are all on this machine, so the loopback interface serves (unless told otherwise).
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank, world_size=world,
                            timeout=TIMEOUT)
