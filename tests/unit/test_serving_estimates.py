"""The closed-form replica model: what it says at light and heavy load, under a cap, when the
KV cache binds, its monotonicity (hypothesis), and that it costs nothing per request."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.serving.estimates import estimate
from ultraplane.serving.llms import language_model
from ultraplane.serving.mixes import TokenMix
from ultraplane.serving.replicas import replica_of

REPLICA = replica_of(language_model("llama-3-70b"), "trn3-gen2", 16, "FP8")
# A code-completion shape like the Azure trace's: long prompts, short outputs.
rng = np.random.default_rng(7)
CODE = TokenMix.from_samples(rng.lognormal(7.2, 1.0, 5000).clip(3, 7437),
                             rng.lognormal(2.7, 0.9, 5000).clip(6, 1900))


def test_a_lone_request_waits_for_nothing_but_its_own_steps() -> None:
    e = estimate(REPLICA, TokenMix.fixed(2048, 11), 0.01)
    full, _ = REPLICA.step(2048, 2048 * 1024, 0, 0)
    decode, _ = REPLICA.step(0, 0, 1, 2048)
    assert e.queueing_quantile(0.99) < 1e-3
    assert e.ttft_quantile(0.5) == pytest.approx(full + decode, rel=0.05)
    assert e.tpot_quantile(0.5) == pytest.approx(decode, rel=0.05)
    assert e.utilization < 0.01 and e.watts == pytest.approx(REPLICA.idle_watts, rel=0.02)


def test_near_capacity_the_queue_makes_the_ttft_tail() -> None:
    light, heavy = estimate(REPLICA, CODE, 10.0), estimate(REPLICA, CODE, 50.0)
    assert 0.1 < light.utilization < 0.3 and 0.7 < heavy.utilization < 0.95
    assert heavy.queueing_quantile(0.99) > 5 * light.queueing_quantile(0.99)
    assert heavy.ttft_quantile(0.99) > heavy.ttft_quantile(0.5)
    # TPOT is held by the chunk budget: a decode token waits at most one full step
    full, _ = REPLICA.step(2048, 2048 * 1500, 0, 0)
    assert heavy.tpot_quantile(0.99) <= full * 1.1
    assert heavy.watts > light.watts > REPLICA.idle_watts
    assert heavy.attainment(1.0, 0.05) == pytest.approx(
        (1 - heavy.ttft_exceedance(1.0)) * (1 - heavy.tpot_exceedance(0.05)))


def test_an_overload_leaves_a_backlog_the_next_interval_inherits() -> None:
    burst = [(60.0, 20.0), (30.0, 90.0), (60.0, 20.0)]
    e = estimate(REPLICA, CODE, burst)
    calm = estimate(REPLICA, CODE, [(150.0, 20.0)])
    assert e.ttft_quantile(0.99) > 2.0 > calm.ttft_quantile(0.99)
    assert e.final_backlog_s == 0.0  # drained in the calm minute after
    assert estimate(REPLICA, CODE, [(30.0, 90.0)]).final_backlog_s > 5.0


def test_a_cap_slows_prefill_and_saves_energy_per_request() -> None:
    free, capped = estimate(REPLICA, CODE, 30.0), estimate(REPLICA, CODE, 30.0, cap=650.0)
    assert capped.utilization > free.utilization
    assert capped.ttft_quantile(0.99) > free.ttft_quantile(0.99)
    assert capped.watts < free.watts
    assert capped.watts <= REPLICA.chips * 650.0


def test_the_kv_cache_bounds_the_batch_by_the_context_lengths() -> None:
    small = replica_of(language_model("llama-3-8b"), "trn2", 1, "FP8")
    short, long = TokenMix.fixed(30_000, 2000), TokenMix.fixed(60_000, 2000)
    room_short = estimate(small, short, 0.01).max_batch
    room_long = estimate(small, long, 0.01).max_batch
    assert room_short == pytest.approx(small.kv_capacity_tokens / 32_000)
    assert room_long == pytest.approx(room_short * 32_000 / 62_000)
    # sequences that stay long fill the cache before the chip is busy: the load counts them
    assert estimate(small, long, 0.2).utilization > 0.2 * 60_000 * 2 * 8.03e9 / small.flops


def test_it_costs_nothing_per_request() -> None:
    """The replay calls it every tick for every service: a window of twenty intervals must
    cost the same at 10 and at 10,000 requests/s, and well under the tick's budget."""
    def cost(rate: float) -> float:
        load = [(15.0, rate * (1 + 0.1 * i)) for i in range(20)]
        times = []
        for _ in range(15):
            t = time.perf_counter()
            estimate(REPLICA, CODE, load).ttft_exceedance(1.0)
            times.append(time.perf_counter() - t)
        return float(np.median(times))
    slow, fast = cost(10_000.0), cost(10.0)
    assert slow < 0.02 and slow < 5 * fast  # generous: a loaded 2-core CI machine


rates = st.floats(min_value=1.0, max_value=45.0)


@settings(max_examples=30, deadline=None)
@given(rates, st.floats(min_value=1.01, max_value=1.5))
def test_more_load_never_lowers_a_p99(rate: float, more: float) -> None:
    low, high = estimate(REPLICA, CODE, rate), estimate(REPLICA, CODE, rate * more)
    assert high.ttft_quantile(0.99) >= low.ttft_quantile(0.99) * 0.999
    assert high.tpot_quantile(0.99) >= low.tpot_quantile(0.99) * 0.999
    assert high.watts >= low.watts


@settings(max_examples=30, deadline=None)
@given(rates, st.floats(min_value=600.0, max_value=950.0), st.floats(min_value=10.0,
                                                                     max_value=300.0))
def test_a_lower_cap_never_lowers_ttft_or_raises_the_draw(rate: float, cap: float,
                                                          lower_by: float) -> None:
    high = estimate(REPLICA, CODE, rate, cap=cap)
    low = estimate(REPLICA, CODE, rate, cap=max(cap - lower_by, 600.0))
    for x in (0.1, 0.3, 1.0):
        assert low.ttft_exceedance(x) >= high.ttft_exceedance(x) - 1e-9
    assert low.watts <= high.watts + 1e-6


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=80.0), min_size=1, max_size=12))
def test_any_load_gives_distributions(rates_: list[float]) -> None:
    e = estimate(REPLICA, CODE, [(15.0, r) for r in rates_])
    for x in (0.05, 0.5, 5.0):
        assert 0.0 <= e.ttft_exceedance(x) <= 1.0 and 0.0 <= e.tpot_exceedance(x / 10) <= 1.0
    assert e.ttft_exceedance(0.5) >= e.ttft_exceedance(5.0)
    assert REPLICA.idle_watts * 0.999 <= e.watts <= REPLICA.chips * REPLICA.power.peak
