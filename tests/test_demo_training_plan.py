"""The demo training schedule: which batch each step trains (models/demo/train.py)."""

from __future__ import annotations

from models.demo import train


def test_the_agent_phase_trains_one_more_drill_batch_after_every_eighth_agent_step():
    cfg = {**train.DEFAULTS, "steps": 20, "drill_every": 8}
    plan = train._agent_plan(cfg, drill_from=300)
    assert [p for p in plan if p[0] == "agent"] == [("agent", i) for i in range(20)]
    # Drill batches continue where the drill phase stopped, one after agent steps 7 and 15.
    assert plan[8] == ("redrill", 300) and plan[17] == ("redrill", 301) and len(plan) == 22


def test_the_schedule_never_ends_on_a_drill_step_so_the_last_agent_step_is_the_one_checked():
    plan = train._agent_plan({**train.DEFAULTS, "steps": 16, "drill_every": 8}, drill_from=0)
    assert plan[-1] == ("agent", 15) and plan.count(("redrill", 0)) == 1


def test_drill_every_zero_means_no_drill_steps_among_the_agent_steps():
    plan = train._agent_plan({**train.DEFAULTS, "steps": 30, "drill_every": 0}, drill_from=0)
    assert plan == [("agent", i) for i in range(30)]
