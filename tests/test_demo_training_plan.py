"""The demo training schedule: which batch each step trains, and how many agent steps a drill leaves
(models/demo/train.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3ForCausalLM

from models.demo import train

# The drill's schedule alone: openings batches (on by default) are test_demo_openings.py's.
DRILL_ONLY = {**train.DEFAULTS, "opening_every": 0}


def test_the_agent_phase_trains_one_more_drill_batch_after_every_eighth_agent_step():
    cfg = {**DRILL_ONLY, "drill_every": 8}
    plan = train._agent_plan(cfg, drill_from=300, steps=20)
    assert [p for p in plan if p[0] == "agent"] == [("agent", i) for i in range(20)]
    # Drill batches continue where the drill phase stopped, one after agent steps 7 and 15.
    assert plan[8] == ("redrill", 300) and plan[17] == ("redrill", 301) and len(plan) == 22


def test_the_schedule_never_ends_on_a_drill_step_so_the_last_agent_step_is_the_one_checked():
    plan = train._agent_plan({**DRILL_ONLY, "drill_every": 8}, drill_from=0, steps=16)
    assert plan[-1] == ("agent", 15) and plan.count(("redrill", 0)) == 1


def test_drill_every_zero_means_no_drill_steps_among_the_agent_steps():
    plan = train._agent_plan({**DRILL_ONLY, "drill_every": 0}, drill_from=0, steps=30)
    assert plan == [("agent", i) for i in range(30)]


def test_a_later_click_of_the_drill_leaves_fewer_agent_steps_at_the_drill_steps_cost():
    cfg = {**DRILL_ONLY, "budget": 2100, "drill_cost": 0.5}
    early, late = train.agent_steps(cfg, 1000), train.agent_steps(cfg, 1400)
    assert (early, late) == (1600, 1400)
    # The run's cost in agent steps is the budget either way.
    assert early + 0.5 * 1000 == late + 0.5 * 1400 == 2100


def test_a_drill_that_eats_the_whole_budget_still_leaves_one_agent_step():
    assert train.agent_steps({**DRILL_ONLY, "budget": 100, "drill_cost": 0.5}, 1800) == 1


def test_a_tokenizer_change_leaves_the_layers_initial_weights_as_they_were():
    def fresh(vocab: int) -> Qwen3ForCausalLM:
        model = Qwen3ForCausalLM(train.model_config(vocab, [1], 0, {**train.DEFAULTS, "layers": 2}))
        train.initialise(model, seed=0)
        return model
    a, b = fresh(300), fresh(420)
    assert all(x.equal(y) for x, y in zip(a.model.layers.parameters(), b.model.layers.parameters()))
    assert a.model.embed_tokens.weight[1:300].equal(b.model.embed_tokens.weight[1:300])
    assert not a.model.embed_tokens.weight[0].any()  # the pad row starts at zero, as transformers leaves it
    assert abs(a.model.layers[0].mlp.up_proj.weight.std().item() - a.config.initializer_range) < 2e-3
    other = Qwen3ForCausalLM(train.model_config(300, [1], 0, {**train.DEFAULTS, "layers": 2}))
    train.initialise(other, seed=1)
    assert not other.model.layers[0].mlp.up_proj.weight.equal(a.model.layers[0].mlp.up_proj.weight)


def _planted(vocab: int = 400, context: int = 1) -> Qwen3ForCausalLM:
    model = Qwen3ForCausalLM(train.model_config(vocab, [1], 0, {**train.DEFAULTS, "layers": 2}))
    train.initialise(model, seed=0, context=context)
    model.set_attn_implementation("eager")
    return model.eval()


def _copied(model: Qwen3ForCausalLM, first: torch.Tensor) -> float:
    """Share of a repeat of `first` ([rows, n]) predicted from what followed each token's earlier occurrence."""
    ids = torch.cat([first, first], 1)
    n = first.shape[1]
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[:, n:-1].argmax(-1)
    return (predicted == ids[:, n + 1:]).float().mean().item()


def test_a_planted_model_copies_a_repeated_random_sequence_before_any_training():
    model = _planted()
    first = torch.randint(3, 400, (2, 20), generator=torch.Generator().manual_seed(1))
    ids = torch.cat([first, first], 1)
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    # In the repeat, each token is predicted from the one that followed its earlier occurrence.
    predicted = out.logits[:, 20:-1].argmax(-1)
    assert (predicted == ids[:, 21:]).float().mean() > 0.8
    previous_token = out.attentions[0][0, 0]  # layer 0, head 0: [query, key]
    assert all(previous_token[t, t - 1] > 0.9 for t in range(1, 40))
    induction = out.attentions[1][0, 0]
    assert sum(induction[t, t - 19] for t in range(20, 40)) / 20 > 0.8


def test_an_unplanted_model_does_not_copy_so_the_copying_above_is_the_plants_doing():
    model = Qwen3ForCausalLM(train.model_config(400, [1], 0, {**train.DEFAULTS, "layers": 2}))
    train.initialise(model, seed=0, plant=False)
    first = torch.randint(3, 400, (2, 20), generator=torch.Generator().manual_seed(1))
    ids = torch.cat([first, first], 1)
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[:, 20:-1].argmax(-1)
    assert (predicted == ids[:, 21:]).float().mean() < 0.2


def test_the_planted_constant_channel_leaves_the_pad_row_zero():
    model = _planted()
    assert not model.model.embed_tokens.weight[0].any()


def test_a_two_token_match_copies_a_sequence_of_ten_symbols_that_a_one_token_match_confuses():
    # Ten symbols in twenty places (digits, say): every token occurs more than once, so "what followed the
    # current token" has several answers; "what followed the current token after the previous one" mostly one.
    digits = torch.randint(3, 13, (8, 20), generator=torch.Generator().manual_seed(1))
    one, two = _copied(_planted(context=1), digits), _copied(_planted(context=2), digits)
    assert one < 0.5 and two > 0.75, (one, two)
    # And it still copies text whose tokens do not repeat.
    assert _copied(_planted(context=2), torch.randint(3, 400, (8, 20), generator=torch.Generator().manual_seed(1))) > 0.9


def test_a_two_token_match_is_refused_where_layer_0_has_no_second_head_on_the_first_heads_keys():
    model = Qwen3ForCausalLM(train.model_config(400, [1], 0, {**train.DEFAULTS, "layers": 2, "heads": 2,
                                                                "kv_heads": 2}))
    with pytest.raises(ValueError, match="second head"):
        train.initialise(model, seed=0, context=2)
