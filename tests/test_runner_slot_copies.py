"""The runner's host copies of a layer's KV, which slot saves and restores go through."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.loader import load_model
from models.model_runner import ModelRunner


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_layer_read_out_of_the_pages_keeps_its_values_when_the_pages_are_written_afterwards(tiny_checkpoint,
                                                                                             dtype):
    runner = ModelRunner(load_model(tiny_checkpoint("qwen3", layers=2), dtype), 16, {"full": 8, "window": 8})
    kvh, d = runner.spec.num_kv_heads, runner.spec.head_dim
    table = [3, 5]
    values = np.arange(20 * kvh * d, dtype=np.float32).reshape(20, kvh, d) % 97
    stored = values if dtype == "float32" else torch.from_numpy(values).bfloat16().view(torch.uint16).numpy()
    runner.write_layer(0, table, 4, stored, stored + 1)
    k, v = runner.read_layer(0, table, 4, 24)
    assert np.array_equal(k, stored) and np.array_equal(v, stored + 1)
    runner.write_layer(0, table, 4, np.zeros_like(stored), np.zeros_like(stored))  # the pages change...
    assert np.array_equal(k, stored) and np.array_equal(v, stored + 1)  # ...the copies read before do not
    assert not np.shares_memory(k, runner.kv[0][0].numpy() if dtype == "float32"
                                else runner.kv[0][0].view(torch.uint16).numpy())
