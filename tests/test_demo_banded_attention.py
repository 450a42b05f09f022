"""Training's banded attention computes what sdpa computes (models/demo/banded_attention.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from models.demo import banded_attention, dataset, train


def _model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, use_sliding_window=True,
                         sliding_window=8, max_window_layers=1, tie_word_embeddings=True, pad_token_id=0)
    return Qwen3ForCausalLM(config).float()


def _batch(prefix_len: int) -> dataset.Batch:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (3, 37), generator=g)
    labels = ids.clone()
    ids[1, 29:], labels[1, 28:] = 0, dataset.IGNORE  # right padding carries no loss
    ids[2, 5:], labels[2, 4:] = 0, dataset.IGNORE  # a row shorter than one window
    return dataset.Batch(torch.randint(1, 50, (1, prefix_len), generator=g), ids, labels)


@pytest.mark.parametrize("prefix_len", [0, 3, 13])
def test_banded_attention_gives_the_same_loss_and_gradients_as_sdpa(prefix_len):
    model, batch = _model(), _batch(prefix_len)
    model.set_attn_implementation("sdpa")
    want = train._loss(model, batch)
    want_grads = torch.autograd.grad(want, list(model.parameters()))
    banded_attention.use_banded_attention(model)
    got = train._loss(model, batch)
    got_grads = torch.autograd.grad(got, list(model.parameters()))
    assert torch.allclose(got, want, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-5)


def test_the_block_mask_lets_each_query_see_exactly_its_window():
    mask = banded_attention._block_mask(blocks=3, window=4, past=2, heads=1, device="cpu")[0]  # [blocks, W, 2W]
    for j in range(3):
        for i in range(4):
            query = 2 + j * 4 + i
            seen = {2 + (j - 1) * 4 + k for k in range(8) if mask[j, i, k]}
            assert seen == {key for key in range(query - 3, query + 1) if key >= 0}
