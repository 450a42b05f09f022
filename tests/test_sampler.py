"""The sampler's draw survives any sampling parameters the route accepts (models/sampler.py)."""

from __future__ import annotations

import numpy as np
import torch

from models.sampler import SCORE_ROWS, new_state, sample, score
from scheduler.sampling_params import SamplingParams


def _logits() -> torch.Tensor:
    return torch.tensor([[1.0, 5.0, -2.0, 3.0]])  # [1 sequence, vocab 4]


def test_a_temperature_too_small_to_divide_by_samples_greedily_instead_of_failing():
    for temperature in (1e-300, 5e-324, 1e-45, 1e-6):
        params = SamplingParams(temperature=temperature, seed=1)
        assert params.greedy
        [drawn] = sample(_logits(), [new_state(params, 0, [])], [([], [])])
        assert drawn.token == 1


def test_a_tiny_repetition_penalty_makes_seen_tokens_certain_rather_than_breaking_the_draw():
    for prompt, certain in (([3], {3}), ([0, 3], {0, 3})):
        for seed in range(8):
            state = new_state(SamplingParams(temperature=1.0, repetition_penalty=1e-40, seed=seed), 0, [])
            [drawn] = sample(_logits(), [state], [(prompt, [])])
            assert drawn.token in certain  # a seen positive logit over 1e-40 is past float32's range


def test_a_masked_token_stays_impossible_when_the_allowed_ones_fall_off_float32s_range():
    logits = torch.tensor([[5.0, -1e34, 3.0, -2e34]])  # [1, vocab 4]

    class OnlyOneAndThree:  # a grammar's mask: tokens 1 and 3
        def forced_token(self):
            return None

        def allowed_tokens(self):
            return np.array([0b1010], dtype=np.int32)

        def accept(self, token):
            pass

    for seed in range(8):
        state = new_state(SamplingParams(temperature=1e-5, seed=seed), 0, [OnlyOneAndThree()])
        [drawn] = sample(logits, [state], [([], [])])
        assert drawn.token == 1  # -1e34 / 1e-5 is -inf, as is every masked token: the best allowed one


def test_seeds_that_differ_only_above_32_bits_draw_different_tokens():
    # torch's CPU generator keeps 32 bits of its seed: 0, 2**32 and 2**63 once drew the same tokens.
    logits = torch.zeros(1, 1000)  # uniform: every draw is the generator's

    def draws(seed: int, index: int = 0) -> list[int]:
        state = new_state(SamplingParams(temperature=1.0, seed=seed), index, [])
        return [sample(logits, [state], [([], [])])[0].token for _ in range(8)]
    runs = [draws(0), draws(2**32), draws(2**63), draws(-(2**63)), draws(2**64 - 1), draws(0, index=1)]
    assert len({tuple(r) for r in runs}) == len(runs)
    assert draws(2**32) == draws(2**32)  # and a seed still repeats itself


def test_scoring_prompt_rows_in_blocks_gives_each_tokens_logprob_rank_and_alternatives():
    gen = torch.Generator().manual_seed(0)
    rows = 2 * SCORE_ROWS + 22  # three blocks, the last one short
    logits = torch.randn(rows, 50, generator=gen) * 3
    following = torch.randint(0, 50, (rows,), generator=gen).tolist()
    scored = score(logits, following, 3)
    logprobs = torch.log_softmax(logits, dim=-1)
    for r, (lp, rank, top) in enumerate(scored):
        own = logprobs[r, following[r]]
        assert abs(lp - float(own)) < 1e-6
        assert rank == 1 + int((logprobs[r] > own).sum())
        assert [t for t, _ in top] == torch.topk(logprobs[r], 3).indices.tolist()
    assert [alt for _, _, alt in score(logits, following, 0)] == [[]] * rows
