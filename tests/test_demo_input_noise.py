"""Noise on read-back assistant tokens (models/demo/input_noise.py): what it may touch and what it may not."""

from __future__ import annotations

import torch

from models.demo.dataset import IGNORE, Batch
from models.demo.input_noise import noised

PLAIN = torch.arange(10, 50)  # ordinary ids; 0-9 stand for markers and control tokens


def _batch() -> Batch:
    # Row 0: a user turn (ids 10-19, untrained) and then an assistant turn whose targets are trained.
    # labels[t] is the target at position t, ids[t + 1] where trained (dataset._collate).
    ids = torch.tensor([[*range(10, 20), 3, *range(20, 50), 4, 0, 0]])  # [1, 44]; 3, 4 markers, 0 padding
    labels = torch.full_like(ids, IGNORE)
    labels[0, 9:41] = ids[0, 10:42]  # the marker 3, the assistant's 30 tokens and the closing marker 4
    return Batch(torch.zeros((1, 0), dtype=torch.long), ids, labels)


def test_only_tokens_the_model_reads_back_from_its_own_output_are_replaced():
    batch = _batch()
    out = noised(batch, 1.0, PLAIN, torch.Generator().manual_seed(0))
    changed = (out.ids != batch.ids)[0].nonzero().flatten().tolist()
    assert changed, "at share 1.0 some read-back token must change"
    # The user's tokens (0-9), the markers (10, 41) and the padding are never touched.
    assert all(11 <= t <= 40 for t in changed)
    assert torch.isin(out.ids[0, changed], PLAIN).all()


def test_the_targets_stay_the_corpus_own_tokens():
    batch = _batch()
    out = noised(batch, 0.5, PLAIN, torch.Generator().manual_seed(1))
    assert torch.equal(out.labels, batch.labels)
    assert not torch.equal(out.ids, batch.ids)
    assert torch.equal(batch.ids, _batch().ids), "the batch itself is not modified"


def test_the_same_generator_seed_gives_the_same_noise_and_share_zero_gives_none():
    batch = _batch()
    first = noised(batch, 0.3, PLAIN, torch.Generator().manual_seed(7))
    again = noised(batch, 0.3, PLAIN, torch.Generator().manual_seed(7))
    assert torch.equal(first.ids, again.ids)
    assert torch.equal(noised(batch, 0.0, PLAIN, torch.Generator().manual_seed(7)).ids, batch.ids)


def test_about_the_asked_share_of_read_back_tokens_is_replaced():
    ids = torch.randint(10, 50, (64, 200), generator=torch.Generator().manual_seed(2))
    labels = ids.roll(-1, dims=1)
    labels[:, -1] = IGNORE
    batch = Batch(torch.zeros((1, 0), dtype=torch.long), ids, labels)
    out = noised(batch, 0.05, PLAIN, torch.Generator().manual_seed(3))
    # A replacement may draw the token it replaces (1 in 40 here), so count draws, not differences.
    share = (out.ids != ids).float().mean().item() / (1 - 1 / len(PLAIN))
    assert 0.04 < share < 0.06
