"""Data-parallel demo training takes the whole batch's step (models/demo/data_parallel.py).

Each rank trains every world-th row of a batch, its summed token loss over the whole batch's count
of trained tokens; the ranks' gradients, added, are the gradient of the batch's mean loss. `run`
really starts the ranks as processes and `all_reduce` really adds across them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from models.demo import data_parallel, train
from test_demo_banded_attention import _batch, _model

PAD = 0


def _grads(model, loss) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, list(model.parameters()), allow_unused=True))


def test_the_ranks_shares_add_up_to_the_whole_batchs_loss_and_gradients():
    model, batch = _model(), _batch(13)
    want = train._loss(model, batch)
    want_grads = _grads(model, want)
    total = data_parallel.trained_tokens(batch)
    for world in (2, 3):
        shares = [data_parallel.rows_of(batch, rank, world, PAD) for rank in range(world)]
        assert sum(s.ids.shape[0] for s in shares) == batch.ids.shape[0]
        losses = [train._loss(model, s, over=total) for s in shares]
        assert torch.allclose(sum(losses), want, atol=1e-6)
        summed = [sum(g) for g in zip(*(_grads(model, loss) for loss in losses))]
        for got, expected in zip(summed, want_grads):
            assert torch.allclose(got, expected, atol=1e-5)


def test_a_ranks_rows_are_trimmed_to_their_own_width():
    batch = _batch(0)  # row 2 is 5 tokens long, row 0 all 37
    assert data_parallel.rows_of(batch, 0, 2, PAD).ids.shape == (2, 37)
    alone = data_parallel.rows_of(batch, 2, 3, PAD)
    assert alone.ids.shape == (1, 5) and alone.labels.shape == (1, 5)
    assert data_parallel.rows_of(batch, 1, 4, PAD).ids.shape[0] == 1
    assert data_parallel.rows_of(batch, 3, 4, PAD).ids.shape[0] == 0  # fewer rows than ranks: nothing


def _fit(rank: int) -> list[float]:
    grad = torch.nn.Parameter(torch.zeros(3))
    grad.grad = torch.full((3,), float(rank + 1))
    numbers = data_parallel.all_reduce([grad], [10.0 * (rank + 1)])
    return [*grad.grad.tolist(), *numbers, float(dist.get_world_size())]


def test_run_starts_the_ranks_as_processes_and_all_reduce_adds_their_gradients_and_numbers():
    assert data_parallel.run(2, _fit) == [3.0, 3.0, 3.0, 30.0, 2.0]
    assert data_parallel.run(1, lambda rank: rank) == 0


def _fit_with_a_gradless_parameter(rank: int) -> list:
    shared, frozen = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    if rank == 0:  # rank 1 had no rows: no gradient at all
        shared.grad = torch.ones(2)
    data_parallel.all_reduce([shared, frozen], [])
    return [shared.grad.tolist(), frozen.grad]


def test_a_rank_without_gradients_adds_zeros_and_a_parameter_no_rank_touched_keeps_none():
    assert data_parallel.run(2, _fit_with_a_gradless_parameter) == [[1.0, 1.0], None]
