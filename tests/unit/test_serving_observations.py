"""The observed load from vLLM counters and histograms at two instants (`serving.observations`)."""

from __future__ import annotations

import math

import pytest

from ultraplane.serving.observations import (
    Histogram,
    ReplicaSample,
    increase,
    observe,
    quantile,
    share_within,
)
from ultraplane.serving.planners import Objective

INF = math.inf


def hist(*cum: float, bounds: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0)) -> Histogram:
    return Histogram(tuple(zip((*bounds, INF), cum, strict=True)))


def sample(t: float, requests: float, ttft: Histogram, tpot: Histogram | None = None,
           prompt: float = 0.0, output: float = 0.0) -> ReplicaSample:
    return ReplicaSample(t=t, requests=requests, prompt_tokens=prompt, output_tokens=output,
                         ttft=ttft, tpot=tpot or hist(0, 0, 0, 0, 0))


def test_quantile_interpolates_inside_the_bucket_like_histogram_quantile() -> None:
    # 100 observations: 50 under 0.1 s, 40 in (0.1, 0.5], 10 in (0.5, 1.0]
    h = hist(50, 90, 100, 100, 100)
    assert quantile(0.5, h) == pytest.approx(0.1)
    assert quantile(0.7, h) == pytest.approx(0.1 + 0.4 * 20 / 40)
    assert quantile(0.99, h) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert quantile(0.99, hist(0, 0, 0, 0, 0)) is None


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert quantile(0.99, hist(10, 10, 10, 10, 100)) == pytest.approx(2.0)


def test_share_within_reads_the_cumulative_counts() -> None:
    h = hist(50, 90, 100, 100, 100)
    assert share_within(h, 0.5) == pytest.approx(0.9)
    assert share_within(h, 0.3) == pytest.approx((50 + 40 * 0.2 / 0.4) / 100)
    assert share_within(h, 5.0) == pytest.approx(1.0)


def test_a_counter_that_went_down_was_reset() -> None:
    assert increase(100, 130) == 30
    assert increase(100, 7) == 7


def test_the_service_rate_sums_each_replicas_rate_over_its_own_instants() -> None:
    before = {"a": sample(0.0, 100, hist(0, 0, 0, 0, 0)), "b": sample(1.0, 50, hist(0, 0, 0, 0, 0))}
    after = {"a": sample(10.0, 300, hist(100, 200, 200, 200, 200)),
             "b": sample(11.0, 150, hist(50, 100, 100, 100, 100)),
             "new": sample(11.0, 999, hist(999, 999, 999, 999, 999))}  # no rate yet
    load = observe(before, after, Objective(ttft_ms=100, tpot_ms=50))
    assert load is not None
    assert load.requests_per_second == pytest.approx(20 + 10)
    assert load.replicas == 2
    # 150 of 300 under 0.1 s, the rest in (0.1, 0.5]
    assert load.ttft_p99_ms == pytest.approx((0.1 + 0.4 * (297 - 150) / 150) * 1e3)
    assert load.slo_attainment == pytest.approx(0.5)


def test_a_reset_replica_counts_from_zero() -> None:
    before = {"a": sample(0.0, 1000, hist(900, 1000, 1000, 1000, 1000), prompt=5e5, output=1e4)}
    after = {"a": sample(10.0, 40, hist(40, 40, 40, 40, 40), prompt=40 * 300, output=40 * 20)}
    load = observe(before, after)
    assert load is not None
    assert load.requests_per_second == pytest.approx(4.0)
    assert load.prompt_tokens_per_request == pytest.approx(300)
    assert load.output_tokens_per_request == pytest.approx(20)
    assert load.ttft_p99_ms is not None and load.ttft_p99_ms < 100


def test_no_replica_sampled_twice_is_no_load() -> None:
    assert observe({}, {"a": sample(1.0, 5, hist(0, 0, 0, 0, 0))}) is None


def test_the_mix_from_length_histograms_keeps_the_counters_means() -> None:
    lengths = Histogram(((100.0, 0.0), (1000.0, 90.0), (10000.0, 100.0), (INF, 100.0)))
    outs = Histogram(((10.0, 50.0), (100.0, 100.0), (INF, 100.0)))
    zero = Histogram(((100.0, 0.0), (1000.0, 0.0), (10000.0, 0.0), (INF, 0.0)))
    zero_o = Histogram(((10.0, 0.0), (100.0, 0.0), (INF, 0.0)))
    empty = hist(0, 0, 0, 0, 0)
    before = {"a": ReplicaSample(0.0, 0, 0, 0, empty, empty, zero, zero_o)}
    after = {"a": ReplicaSample(10.0, 100, 100 * 800, 100 * 30, empty, empty, lengths, outs)}
    load = observe(before, after)
    assert load is not None and load.mix is not None
    assert load.mix.mean_prompt == pytest.approx(800)
    assert float(load.mix.prompts[-1]) > 4 * float(load.mix.prompts[0])  # a spread, not one size
    assert load.observation().requests == 100
