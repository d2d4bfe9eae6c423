"""Locality by default, through the one path every adapter uses (`Scheduler` -> `Allocator`).

Fleets (Trn3 Gen2, 144 chips per UltraServer):
    block-000: gen2-0000 gen2-0001     block-001: gen2-0002
and the same with two Trn2 UltraServers (64 chips each) in a block of their own, so a gang
that fits one Gen2 UltraServer could be tempted onto two small ones.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import Topology, build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.placement.placements import request_from_topology
from ultraplane.scheduling.scheduler import Scheduler
from ultraplane.workloads import QueuedJob

SIZES = [1, 4, 16, 36, 64, 72, 100, 128, 144, 200, 288, 72, 100]
LEVELS = [None, "server", "rack", "ultraserver", "block", "cluster"]
MODES = [None, "Local", "SplitWhenItPays", "Unconstrained"]


def _fleet(mixed: bool) -> Topology:
    gen2 = build_fleet("trn3-gen2", 3, per_block=2)
    if not mixed:
        return gen2
    trn2 = build_fleet("trn2", 2, per_block=2, prefix="small")
    return Topology(gen2.ultraservers + tuple(
        type(us)(us.name, us.profile, ("block-009",)) for us in trn2.ultraservers))


job = st.tuples(st.sampled_from(SIZES), st.sampled_from(LEVELS), st.sampled_from(MODES),
                st.integers(0, 3), st.sampled_from([None, None, 2]))
# Rounds: submit a few jobs, cancel a few, run one cycle (as the operator does per event batch).
rounds = st.lists(st.tuples(st.lists(job, min_size=1, max_size=5),
                            st.lists(st.integers(0, 30), max_size=2)), min_size=1, max_size=10)


@settings(max_examples=150, deadline=None)
@given(st.booleans(), rounds)
def test_no_gang_that_fits_one_ultraserver_is_split_unless_it_opts_in(
        mixed: bool, plan: list[tuple[list[tuple[Any, ...]], list[int]]]) -> None:
    topo = _fleet(mixed)
    biggest = max(us.chip_count for us in topo.ultraservers)
    sched = Scheduler(Allocator(topo))
    requests: dict[JobKey, PlacementRequest] = {}
    for jobs, cancels in plan:
        for size, level, mode, priority, replicas in jobs:
            topology = {k: v for k, v in (("requiredLevel", level), ("mode", mode)) if v}
            key = JobKey(f"j{len(requests)}")
            requests[key] = request_from_topology(size, topology)
            sched.submit(QueuedJob(key, requests[key], priority, len(requests),
                                   replicas=replicas))
        for i in cancels:
            sched.cancel(JobKey(f"j{i}"))
        result = sched.cycle()
        placed = [(k, (p,)) for k, p in result.admitted] + list(result.admitted_replicas)
        for key, placements in placed:
            request = requests[key]
            for placement in placements:
                if request.mode == "Local" and request.chips <= biggest:
                    # fits one NeuronSwitch domain and did not opt in: never split
                    assert len(placement.ultraservers) == 1, (key, request, placement)


def test_defaults_of_the_mode() -> None:
    assert PlacementRequest(chips=8).mode == "Local"
    assert PlacementRequest(chips=8, required_level="ultraserver").mode == "Local"
    assert PlacementRequest(chips=8, required_level="block").mode == "Unconstrained"
    assert PlacementRequest(chips=8, required_level="cluster").mode == "Unconstrained"
    assert PlacementRequest(chips=8, required_level="block", mode="Local").mode == "Local"
    assert request_from_topology(8, {"mode": "SplitWhenItPays"}).mode == "SplitWhenItPays"


def test_bad_topology_blocks_name_the_field() -> None:
    for topo, field in (({"mode": "Sometimes"}, "topology.mode"),
                        ({"requiredLevel": "galaxy"}, "topology.requiredLevel")):
        try:
            request_from_topology(8, topo)
        except ValueError as exc:
            assert str(exc).startswith(field + ":"), exc
        else:
            raise AssertionError(f"{topo} was accepted")
