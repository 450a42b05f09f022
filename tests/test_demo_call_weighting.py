"""The --call-weight training option: which target tokens weigh more, and that the loss stays a per-token mean."""

import torch

from models.demo import data_parallel, dataset, train
from models.demo.call_weighting import call_token_weights
from test_demo_banded_attention import _batch, _model

OPEN, CLOSE, IGN = 7, 8, dataset.IGNORE


def test_the_call_block_from_opener_to_closer_weighs_more_and_nothing_else_does():
    labels = torch.tensor([[IGN, 3, 4, OPEN, 5, 6, CLOSE, 2, IGN],
                           [1, 2, 3, 4, 5, 6, 9, 2, IGN]])
    weights = call_token_weights(labels, OPEN, CLOSE, 3.0)
    assert weights[0].tolist() == [1, 1, 1, 3, 3, 3, 3, 1, 1]
    assert weights[1].tolist() == [1.0] * 9


def test_each_of_two_calls_in_a_row_weighs_more_but_the_text_between_them_does_not():
    labels = torch.tensor([[OPEN, 5, CLOSE, 2, 2, OPEN, 6, CLOSE, 1]])
    assert call_token_weights(labels, OPEN, CLOSE, 2.0)[0].tolist() == [2, 2, 2, 1, 1, 2, 2, 2, 1]


def test_an_opener_whose_closer_is_past_the_row_weighs_to_the_end():
    labels = torch.tensor([[1, OPEN, 5, 6]])
    assert call_token_weights(labels, OPEN, CLOSE, 4.0)[0].tolist() == [1, 4, 4, 4]


def test_weights_of_one_give_the_plain_mean_loss():
    model, batch = _model(), _batch(5)
    ones = torch.ones(batch.labels.shape)
    assert torch.allclose(train._loss(model, batch, weights=ones), train._loss(model, batch), atol=1e-6)


def test_weighted_ranks_shares_add_up_to_the_whole_batchs_weighted_loss():
    model, batch = _model(), _batch(13)
    opener, closer = int(batch.labels[0, 3]), int(batch.labels[0, 9])  # any two ids serve as the markers
    whole = train._loss(model, batch, weights=call_token_weights(batch.labels, opener, closer, 3.0))
    assert not torch.allclose(whole, train._loss(model, batch))
    total = data_parallel.trained_tokens(batch)
    shares = [data_parallel.rows_of(batch, rank, 2, 0) for rank in range(2)]
    parts = [train._loss(model, s, over=total, weights=call_token_weights(s.labels, opener, closer, 3.0))
             for s in shares]
    assert torch.allclose(sum(parts), whole, atol=1e-6)
