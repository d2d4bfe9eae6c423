"""The planner and the two baselines: sizing to the objective, the trend rule, the scale-down
delay, the cap, min and max, determinism; static-peak at the peak minute; the HPA algorithm.

The windows below are drawn as requests/s per interval, oldest first, e.g.

    rate  ▁▁▁▁▁▁▁▁█     a burst after a lull (not a trend)
    rate  ▁▂▃▄▅▆▇█      a ramp (a trend: moved one start-up time ahead)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from ultraplane.serving.baselines import Hpa, HpaState, peak_minute, static_peak
from ultraplane.serving.estimates import estimate
from ultraplane.serving.llms import language_model
from ultraplane.serving.mixes import Observation, TokenMix
from ultraplane.serving.planners import (
    CAP_STEP_W,
    HEADROOM,
    Autoscaling,
    Objective,
    meets,
    plan,
)
from ultraplane.serving.replicas import replica_of

REPLICA = replica_of(language_model("llama-3-70b"), "trn3-gen2", 16, "FP8")
OBJECTIVE = Objective(ttft_ms=1000, tpot_ms=50)
SPEC = Autoscaling(min_replicas=1, max_replicas=72, objective=OBJECTIVE, scale_down_delay_s=300)
rng = np.random.default_rng(11)
CODE = TokenMix.from_samples(rng.lognormal(7.2, 1.0, 4000).clip(3, 7437),
                             rng.lognormal(2.7, 0.9, 4000).clip(6, 1900))


def window(rates: Sequence[float], seconds: float = 60.0, start: float = 0.0) -> list[Observation]:
    return [Observation(start + i * seconds, seconds, round(r * seconds), CODE if r else None)
            for i, r in enumerate(rates)]


def smallest(load: Sequence[tuple[float, float]]) -> int:
    """The fewest replicas meeting the objective, by brute force."""
    return next(n for n in range(1, 200)
                if meets(REPLICA, [(s, r / n) for s, r in load], [CODE] * len(load), OBJECTIVE)[0])


def test_a_steady_load_gets_the_fewest_replicas_that_meet_the_objective() -> None:
    d = plan(REPLICA, window([1000.0] * 10), SPEC, current=20)
    assert d.replicas == smallest([(60.0, 1000.0 * (1 + HEADROOM))] * 10)
    assert not meets(REPLICA, [(60.0, 1100.0 / (d.replicas - 1))] * 10, [CODE] * 10, OBJECTIVE)[0]
    assert d.attainment >= 0.99 and d.forecast_rate == pytest.approx(1100.0)
    assert d.reason.startswith(f"{d.replicas} replicas: the last 10 min")
    assert "." not in d.reason.replace(".", "", d.reason.count("%"))  # one sentence
    # one replica at a 20th of 1,000 req/s: uncapped chips would be wasted
    assert d.cap_watts is not None and d.cap_watts < REPLICA.power.peak


def test_a_burst_after_a_lull_is_sized_for_but_not_extrapolated() -> None:
    #  ▁▁▁▁▁▁▁▁█
    burst = plan(REPLICA, window([100.0] * 8 + [2000.0]), SPEC, current=3)
    assert burst.replicas == smallest([(60.0, 110.0)] * 8 + [(60.0, 2200.0)])
    assert "rising" not in burst.reason


def test_a_ramp_is_moved_one_start_up_time_ahead() -> None:
    #  ▁▂▃▄▅▆▇█  +60 req/s a minute
    ramp = [400.0 + 60.0 * i for i in range(8)]
    d = plan(REPLICA, window(ramp), SPEC, current=10)
    flat = plan(REPLICA, window(ramp), SPEC, current=10, startup_s=0.0)
    assert d.replicas > plan(REPLICA, window(ramp[-1:] * 8), SPEC, current=10).replicas - 1
    assert d.forecast_rate > flat.forecast_rate
    assert "rising 60 req/s a minute" in d.reason
    # each minute moved up to the end + start-up: (end - mid + start-up) x slope
    shift = (REPLICA.startup_s + 30.0) * 1.0
    assert d.forecast_rate == pytest.approx((ramp[-1] + shift) * (1 + HEADROOM), rel=1e-6)


def test_scale_downs_wait_for_the_delay_and_scale_ups_do_not() -> None:
    busy = plan(REPLICA, window([2000.0] * 5), SPEC, current=30)
    quiet = window([200.0] * 5, start=200.0)  # ends 200 s after the busy recommendation
    held = plan(REPLICA, quiet, SPEC, current=busy.replicas, history=busy.history)
    assert held.replicas == busy.replicas and "held for the scale-down delay" in held.reason
    later = window([200.0] * 5, start=601.0)  # 301 s after the busy recommendation
    down = plan(REPLICA, later, SPEC, current=held.replicas, history=held.history)
    assert down.replicas == smallest([(60.0, 220.0)] * 5) < busy.replicas
    up = plan(REPLICA, window([3000.0] * 5, start=900.0), SPEC, current=down.replicas,
              history=down.history)
    assert up.replicas > busy.replicas  # at once


def test_min_max_and_an_empty_window() -> None:
    spec = Autoscaling(2, 10, OBJECTIVE, 300)
    assert plan(REPLICA, window([0.0] * 5), spec, current=4).replicas == 2
    assert "no requests" in plan(REPLICA, window([0.0] * 5), spec, current=4).reason
    capped = plan(REPLICA, window([3000.0] * 5), spec, current=10)
    assert capped.replicas == 10 and capped.attainment < 0.99
    assert "maxReplicas, too few" in capped.reason
    with pytest.raises(ValueError):
        Autoscaling(5, 2, OBJECTIVE)
    with pytest.raises(ValueError):
        plan(REPLICA, [], spec, current=1)


def test_the_cap_is_the_lowest_that_still_meets_the_objective() -> None:
    load = window([1500.0] * 5)
    sized = plan(REPLICA, load, SPEC, current=10)
    # one replica more than needed, held by the scale-down delay: its slack goes to a cap
    d = plan(REPLICA, load, SPEC, current=sized.replicas + 1,
             history=((240.0, sized.replicas + 1),))
    assert d.replicas == sized.replicas + 1
    assert d.cap_watts is not None
    share = [(60.0, 1500.0 * (1 + HEADROOM) / (sized.replicas + 1))] * 5
    assert meets(REPLICA, share, [CODE] * 5, OBJECTIVE, d.cap_watts)[0]
    if d.cap_watts - CAP_STEP_W >= REPLICA.power.cap_min:
        assert not meets(REPLICA, share, [CODE] * 5, OBJECTIVE, d.cap_watts - CAP_STEP_W)[0]
    # exactly sized or short: no cap
    assert plan(REPLICA, load, SPEC, current=sized.replicas // 2).cap_watts is None


def test_the_planner_is_pure_and_deterministic() -> None:
    w = window([300.0, 900.0, 0.0, 1200.0, 800.0])
    history = ((0.0, 12),)
    first = plan(REPLICA, w, SPEC, current=12, history=history)
    again = plan(REPLICA, list(w), SPEC, current=12, history=history)
    assert first == again and history == ((0.0, 12),)


def test_the_planner_follows_the_shared_trace_at_rate_scale_300() -> None:
    """The Azure code trace (Patel et al., ISCA 2024) per minute x 300: between min and max,
    never above the peak minute's static fleet plus what its burst needs, and below it on
    average (the lulls are given back)."""
    from tests.unit.test_serving_fidelity import azure_code  # the trace's one reader

    minutes = [[r for r in azure_code() if m * 60 <= r[0] < (m + 1) * 60] for m in range(58)]
    obs = [Observation(m * 60.0, 60.0, 300 * len(rs),
                       TokenMix.from_samples([p for _, p, _ in rs], [o for _, _, o in rs])
                       if rs else None) for m, rs in enumerate(minutes)]
    fixed = static_peak(REPLICA, obs, OBJECTIVE, 1, 72)
    history: tuple[tuple[float, int], ...] = ()
    replicas = []
    for m in range(len(obs)):
        d = plan(REPLICA, obs[max(0, m - 14):m + 1], SPEC, current=replicas[-1] if replicas else 8,
                 history=history)
        history = d.history
        replicas.append(d.replicas)
    assert min(replicas) >= 1 and max(replicas) <= 72
    assert np.mean(replicas) < fixed


def test_static_peak_is_sized_for_the_busiest_minute() -> None:
    obs = window([100.0, 400.0, 2500.0, 300.0], seconds=15.0) + window([600.0] * 4, 15.0, 60.0)
    peak = peak_minute(obs)
    assert peak.start_s == 0.0 and peak.requests == 15 * (100 + 400 + 2500 + 300)
    n = static_peak(REPLICA, obs, OBJECTIVE, 1, 72)
    assert meets(REPLICA, [(3600.0, peak.rate / n)], [CODE], OBJECTIVE)[0]
    assert not meets(REPLICA, [(3600.0, peak.rate / (n - 1))], [CODE], OBJECTIVE)[0]
    assert static_peak(REPLICA, obs, OBJECTIVE, 1, 3) == 3


#   current  utilization  history (t, rec)   ->  desired   why
HPA_CASES = [
    (10, 0.70, (), 10, "at target"),
    (10, 0.76, (), 10, "ratio 1.086: within the tolerance"),
    (10, 0.78, (), 12, "ratio 1.114: ceil(11.14)"),
    (10, 1.40, (), 20, "ratio 2"),
    (10, 3.50, (), 20, "ratio 5, but at most 2x a period"),
    (2, 3.50, (), 6, "ratio 5, but at most +4 a period"),
    (10, 0.35, (), 5, "ratio 0.5: down at once with no earlier recommendation"),
    (10, 0.35, ((1000.0, 10),), 10, "held by a recommendation of 10 within 300 s"),
    (10, 0.35, ((600.0, 10),), 5, "that recommendation is 400 s old"),
    (80, 0.90, (), 100, "ceil(102.9), clamped to max"),
    (3, 0.10, (), 2, "ceil(0.43), clamped to min"),
]


@pytest.mark.parametrize(("current", "utilization", "history", "desired", "why"), HPA_CASES)
def test_hpa_is_the_kubernetes_algorithm(current: int, utilization: float,
                                         history: tuple[tuple[float, int], ...], desired: int,
                                         why: str) -> None:
    hpa = Hpa(min_replicas=2, max_replicas=100)
    got, state = hpa.step(HpaState(history), 1200.0, current, utilization)
    assert got == desired, why
    assert state.recommendations[-1][0] == 1200.0
    assert all(t > 1200.0 - 300.0 for t, _ in state.recommendations)


def test_hpa_over_time_scales_down_only_after_the_window() -> None:
    hpa, state, current = Hpa(1, 50), HpaState(), 10
    trail = []
    for k in range(40):  # 15 s syncs; the load halves after the first one
        utilization = 1.4 if k == 0 else 0.35 * 20 / current
        current, state = hpa.step(state, 15.0 * k, current, utilization)
        trail.append(current)
    assert trail[0] == 20
    assert set(trail[1:20]) == {20}  # held for 300 s
    assert trail[-1] == 10 and math.isclose(0.35 * 20 / 10, 0.7)


def test_a_replica_of_the_sized_fleet_is_about_as_loaded_as_the_planner_says() -> None:
    d = plan(REPLICA, window([1000.0] * 5), SPEC, current=10)
    e = estimate(REPLICA, CODE, [(60.0, 1100.0 / d.replicas)] * 5)
    assert e.ttft_exceedance(1.0) <= 0.01 and 0.5 < e.utilization < 1.0
