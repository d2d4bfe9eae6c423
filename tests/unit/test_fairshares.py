"""Weighted max-min fair shares (water-filling), and Jain's index."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultraplane.policies.fairshares import fair_shares, jain


@pytest.mark.parametrize(("demand", "weight", "fleet", "want"), [
    # everyone fits: each gets its demand
    ({"a": 100, "b": 50}, {}, 288, {"a": 100, "b": 50}),
    # equal weights, both want the fleet: half each
    ({"a": 288, "b": 288}, {}, 288, {"a": 144, "b": 144}),
    # b wants little: capped at its demand, a takes the rest
    ({"a": 288, "b": 36}, {}, 288, {"a": 252, "b": 36}),
    # weight 2 against 1
    ({"a": 288, "b": 288}, {"a": 2.0}, 288, {"a": 192, "b": 96}),
    # three teams, one capped, the other two split the rest by weight
    ({"a": 500, "b": 500, "c": 48}, {"b": 3.0}, 288, {"a": 60, "b": 180, "c": 48}),
    # a team that wants nothing gets nothing and takes nothing
    ({"a": 288, "b": 0}, {}, 288, {"a": 288, "b": 0}),
])
def test_water_filling(demand: dict[str, float], weight: dict[str, float], fleet: float,
                       want: dict[str, float]) -> None:
    got = fair_shares(demand, weight, fleet)
    assert got == pytest.approx(want)


def test_a_weight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="weight"):
        fair_shares({"a": 10}, {"a": 0.0}, 100)


def test_jain() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) == 1.0


teams = st.dictionaries(st.sampled_from("abcdefgh"),
                        st.tuples(st.integers(0, 2000), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                        min_size=1)


@given(teams, st.integers(0, 3000))
def test_shares_are_weighted_max_min(spec: dict[str, tuple[int, float]], fleet: int) -> None:
    demand = {t: d for t, (d, _) in spec.items()}
    weight = {t: w for t, (_, w) in spec.items()}
    got = fair_shares(demand, weight, fleet)
    # the shares add up to the fleet, or to the demand when that is smaller
    assert sum(got.values()) == pytest.approx(min(fleet, sum(demand.values())))
    for t, share in got.items():
        assert -1e-9 <= share <= demand[t] + 1e-9  # never above what the team wants
    # max-min: a team short of its demand has the largest share per weight of all
    # (nobody could give it more without taking from a team that has no more per weight)
    for t, share in got.items():
        if share < demand[t] - 1e-6:
            for u, other in got.items():
                assert other / weight[u] <= share / weight[t] + 1e-6
