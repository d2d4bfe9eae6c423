"""The one checkpoint arithmetic both simulators charge (`ultraplane.simulator.checkpoints`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ultraplane.simulator.checkpoints import checkpointed_s, checkpoints_in, computed_s, wall_s
from ultraplane.simulator.plans import Plan


@pytest.mark.parametrize(("work", "count"), [
    (0.0, 0), (599.0, 0), (600.0, 0), (601.0, 1), (1200.0, 1), (1800.0, 2), (1800.5, 3),
])
def test_one_checkpoint_per_whole_interval_none_at_the_end(work: float, count: int) -> None:
    assert checkpoints_in(work, 600.0) == count


def test_the_prediction_margin_counts_a_checkpoint_at_the_end_too() -> None:
    assert checkpoints_in(1800.0, 600.0, at_end=True) == 3
    assert checkpoints_in(1799.0, 600.0, at_end=True) == checkpoints_in(1799.0, 600.0) == 2


def test_wall_time_adds_each_checkpoints_cost() -> None:
    assert wall_s(1800.0, 600.0, 30.0) == 1860.0  # two checkpoints, none after the last work
    assert wall_s(0.1 + 0.2 + 1199.7, 600.0, 30.0) == pytest.approx(1230.0)  # float error: whole


def test_a_stopped_attempt_keeps_work_up_to_its_last_checkpoint() -> None:
    # 600 s of work, 30 s writing, twice, then stopped 70 s into the third interval
    assert computed_s(1330.0, 600.0, 30.0) == 1270.0
    assert checkpointed_s(1330.0, 600.0, 30.0) == 1200.0
    assert checkpointed_s(629.0, 600.0, 30.0) == 0.0  # still writing the first one
    assert computed_s(615.0, 600.0, 30.0) == 600.0  # writing time computes nothing


@given(work=st.floats(1.0, 1e6), interval=st.floats(10.0, 1e4), cost=st.floats(0.0, 600.0))
def test_an_attempt_given_its_wall_time_computes_all_its_work(work: float, interval: float,
                                                             cost: float) -> None:
    wall = wall_s(work, interval, cost)
    assert computed_s(wall, interval, cost) == pytest.approx(work, rel=1e-9, abs=1e-6)
    assert checkpointed_s(wall, interval, cost) <= work + 1e-6


def test_plan_uses_the_same_arithmetic() -> None:
    plan = Plan("bf16", "RestartAll", total_steps=30, step_s=60.0, interval_s=600.0,
                checkpoint_s=30.0, restart_s=45.0, duration_s=None, utilization=0.5,
                busy_watts=0.0, extra_watts=0.0, extra_watts_of={}, per_us={})
    assert plan.finish_after(0) == wall_s(1800.0, 600.0, 30.0)
    assert plan.finish_after(10) == 45.0 + wall_s(1200.0, 600.0, 30.0)  # a restart costs
    assert plan.progress(1330.0, 0) == (21, 20)  # 1270 s computed, 1200 s checkpointed
