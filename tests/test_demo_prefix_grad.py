"""Training without the shared system turn's gradient (train.DEFAULTS["prefix_grad"] off).

The system turn still gives every row its keys and values -- the loss is the same -- but no gradient
reaches the weights through them: the step is the one a frozen copy of the model would give if it
had written the prefix's cache.
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache

from models.demo import dataset, train
from test_demo_banded_attention import _batch, _model


def _grads(loss: torch.Tensor, model) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, list(model.parameters()), allow_unused=True))


def test_the_loss_without_the_prefix_gradient_is_the_same_loss():
    model, batch = _model(), _batch(13)
    assert torch.allclose(train._loss(model, batch, prefix_grad=False), train._loss(model, batch), atol=1e-6)


def test_without_the_prefix_gradient_the_step_is_the_rows_own_as_if_a_frozen_copy_wrote_the_prefix():
    model, batch = _model(), _batch(13)
    frozen = copy.deepcopy(model)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        frozen.model(input_ids=batch.prefix_ids, cache=cache, use_cache=True)
    cache.batch_repeat_interleave(batch.ids.shape[0])
    hidden = model.model(input_ids=batch.ids, cache=cache, use_cache=True).last_hidden_state
    trained = batch.labels != dataset.IGNORE
    want = torch.nn.functional.cross_entropy(model.lm_head(hidden[trained]).float(), batch.labels[trained])
    got_grads, want_grads = _grads(train._loss(model, batch, prefix_grad=False), model), _grads(want, model)
    for got, wanted in zip(got_grads, want_grads):
        assert torch.allclose(got, wanted, atol=1e-6)


def test_with_the_prefix_gradient_the_prefix_shapes_the_step():
    model, batch = _model(), _batch(13)
    with_prefix = _grads(train._loss(model, batch), model)
    without = _grads(train._loss(model, batch, prefix_grad=False), model)
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(with_prefix, without))
