"""The model runner: the only code that turns scheduler decisions into tensors.

It owns the KV pool's storage -- per layer `k_pages, v_pages: [num_pages,
page_size, n_kv_heads, head_dim]`, full-attention layers in the full group's
pages and windowed layers in the window group's -- and runs one ragged forward
step: flatten the chunks, plan attention once per group, run the network,
return float32 logits for the chunks that sample. Which page is free, shared or
released is bookkeeping (scheduler/kv_pool.py); the runner just trusts the page
tables it is given.

It also shows pages to slot save/restore as host arrays: `page_views` are
views of a sequence's pages that a save writes its file from and a restore
reads its file into, from their own threads; `read_layer` copies a layer
out (one gather).
"""

from __future__ import annotations

import numpy as np
import torch

from models.config import FULL, SLIDING, ModelSpec
from models.decoder import CausalLM
from models.paged_attention import plan_group
from scheduler.forward_batch import ForwardBatch

GROUP_OF = {FULL: "full", SLIDING: "window"}


class ModelRunner:
    def __init__(self, model: CausalLM, page_size: int, num_pages: dict[str, int], kv_dtype: torch.dtype | None = None):
        spec: ModelSpec = model.spec
        self.model, self.spec, self.page_size = model, spec, page_size
        # The KV pool's dtype; the model may compute in a wider one (cpu_features).
        self.dtype = kv_dtype or model.model.norm.weight.dtype
        self.num_pages = dict(num_pages)
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        for t in spec.layer_types:
            n = num_pages[GROUP_OF[t]]
            shape = (n, page_size, spec.num_kv_heads, spec.head_dim)
            self.kv.append((torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)))
        self.groups_present = {GROUP_OF[t] for t in spec.layer_types}

    @property
    def layer_groups(self) -> list[str]:
        """The pool group ("full" / "window") each layer's KV lives in."""
        return [GROUP_OF[t] for t in self.spec.layer_types]

    @property
    def kv_dtype_name(self) -> str:
        return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[self.dtype]

    @torch.inference_mode()
    def step(self, batch: ForwardBatch) -> torch.Tensor:
        """Run one step; returns logits [R, vocab] (float32) for `batch.logit_rows()`: each chunk's scored
        positions, then its sampled row (ForwardBatch.split_logits takes them apart)."""
        ids, pos = [], []
        for c in batch.chunks:
            ids.extend(c.token_ids)
            pos.extend(range(c.start, c.end))
        logit_rows = batch.logit_rows()
        plans = {}
        if FULL in self.spec.layer_types:
            plans[FULL] = plan_group(batch, lambda c: c.full_pages, None, self.page_size)
        if SLIDING in self.spec.layer_types:
            plans[SLIDING] = plan_group(batch, lambda c: c.window_pages, self.spec.sliding_window, self.page_size)
        logits = self.model(
            torch.tensor(ids, dtype=torch.long),
            torch.tensor(pos, dtype=torch.long),
            self.kv,
            plans,
            torch.tensor(logit_rows, dtype=torch.long),
        )
        return logits.float()

    # --- slots: host <-> pages -------------------------------------------------

    def _slots(self, table: list[int], start: int, end: int) -> np.ndarray:
        # Flat pool slots of positions [start, end): page table[i // page], offset i % page. In numpy: a
        # restore's thread calls this per layer, and torch ops there made a 448 MiB restore 365 ms, not 275.
        p = self.page_size
        pages = np.asarray(table[start // p:(end - 1) // p + 1], dtype=np.int64)  # None here is a bug
        positions = np.arange(start, end)
        return pages[positions // p - start // p] * p + positions % p

    @torch.inference_mode()
    def read_layer(self, layer: int, table: list[int], start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V of positions [start, end) of one layer as host arrays [n, kvh, d].

        bfloat16 has no numpy dtype, so it is returned as its uint16 bit pattern.
        """
        k_pages, v_pages = self.kv[layer]
        idx = torch.from_numpy(self._slots(table, start, end))
        kvh, d = self.spec.num_kv_heads, self.spec.head_dim
        k = k_pages.view(-1, kvh, d).index_select(0, idx)
        v = v_pages.view(-1, kvh, d).index_select(0, idx)
        return _to_numpy(k), _to_numpy(v)

    def page_views(self, layer: int, kind: str, table: list[int], start: int, end: int) -> list[np.ndarray]:
        """Writable host views of where positions [start, end) of one layer's K (`kind` "K") or V ("V") live
        in the pool: arrays [m, kvh, d] sharing the pool's memory, in position order, one per run of
        consecutive pages. bfloat16 shows as its uint16 bit patterns, as slot files hold it.

        A restore reads its file straight into these and a save writes its file straight out of them, each
        from its own thread while the engine steps: no intermediate copy, and no torch op whose OpenMP
        threads would fight the hashing thread for the cores. A restore's pages are its own, in no
        sequence's table and not in the cache yet; a save's are referenced cache pages, which nothing
        rewrites; so nothing else writes them meanwhile."""
        pages = self.kv[layer][0 if kind == "K" else 1]
        if self.dtype == torch.bfloat16:
            pages = pages.view(torch.uint16)
        flat = pages.numpy().reshape(-1, self.spec.num_kv_heads, self.spec.head_dim)  # the pool's own memory
        if start >= end:
            return []
        idx = self._slots(table, start, end)
        runs = np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)  # consecutive pool rows
        return [flat[run[0]:run[-1] + 1] for run in runs]


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # `t` is index_select's fresh tensor, never a view of the pages: the array shares its memory and keeps
    # it alive, so a later write to the pages cannot reach it. A .copy() here copied a 448 MiB snapshot twice.
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.uint16).numpy()
    return t.contiguous().numpy()
