"""The runner's host copies of a layer's KV, which slot saves and restores go through."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.loader import load_model
from models.model_runner import ModelRunner


def _runner(tiny_checkpoint, dtype: str) -> ModelRunner:
    return ModelRunner(load_model(tiny_checkpoint("qwen3", layers=2), dtype), 16, {"full": 8, "window": 8})


def _rows(runner: ModelRunner, n: int, dtype: str) -> np.ndarray:
    kvh, d = runner.spec.num_kv_heads, runner.spec.head_dim
    values = np.arange(n * kvh * d, dtype=np.float32).reshape(n, kvh, d) % 97
    return values if dtype == "float32" else torch.from_numpy(values).bfloat16().view(torch.uint16).numpy()


def _write(runner: ModelRunner, layer: int, table: list[int], start: int, k: np.ndarray, v: np.ndarray) -> None:
    for kind, rows in (("K", k), ("V", v)):
        views = runner.page_views(layer, kind, table, start, start + len(rows))
        assert sum(len(view) for view in views) == len(rows)
        at = 0
        for view in views:
            view[...] = rows[at:at + len(view)]
            at += len(view)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_layer_read_out_of_the_pages_keeps_its_values_when_the_pages_are_written_afterwards(tiny_checkpoint,
                                                                                             dtype):
    runner = _runner(tiny_checkpoint, dtype)
    table = [3, 5]
    stored = _rows(runner, 20, dtype)
    _write(runner, 0, table, 4, stored, stored + 1)
    k, v = runner.read_layer(0, table, 4, 24)
    assert np.array_equal(k, stored) and np.array_equal(v, stored + 1)
    _write(runner, 0, table, 4, np.zeros_like(stored), np.zeros_like(stored))  # the pages change...
    assert np.array_equal(k, stored) and np.array_equal(v, stored + 1)  # ...the copies read before do not
    assert not np.shares_memory(k, runner.kv[0][0].numpy() if dtype == "float32"
                                else runner.kv[0][0].view(torch.uint16).numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_page_views_cover_scattered_and_consecutive_pages_in_position_order(tiny_checkpoint, dtype):
    runner = _runner(tiny_checkpoint, dtype)
    table = [6, 2, 3, 4, 0]  # page 2 runs on into 3 and 4; 6 and 0 stand alone
    views = runner.page_views(1, "V", table, 9, 70)
    assert [len(view) for view in views] == [7, 48, 6]  # 9..16 in page 6, 16..64 in pages 2-4, 64..70 in 0
    stored = _rows(runner, 61, dtype)
    _write(runner, 1, table, 9, stored + 3, stored)
    k, v = runner.read_layer(1, table, 9, 70)
    assert np.array_equal(v, stored) and np.array_equal(k, stored + 3)
    assert not runner.kv[0][0].any() and not runner.kv[0][1].any()  # another layer is untouched
