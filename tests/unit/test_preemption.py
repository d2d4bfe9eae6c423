"""Preemption planning: the fewest lower-priority victims inside ONE domain that really frees it."""

from __future__ import annotations

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey, chip_id
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.placement.preemption import PreemptionPlan, plan_preemption


def cluster(count: int, jobs: dict[str, list[tuple[int, range]]],
            per_block: int = 16) -> Allocator:
    """jobs: key -> [(ultraserver index, servers)] holding every chip of those servers."""
    alloc = Allocator(build_fleet("trn3-gen2", count, per_block=per_block))
    for key, spans in jobs.items():
        ids = [chip_id(f"gen2-{u:04d}", s, c) for u, servers in spans for s in servers
               for c in range(4)]
        alloc.assign(JobKey(key), ids)
    return alloc


def plan(alloc: Allocator, chips: int, priority: int, running: dict[str, int],
         **kw: str) -> PreemptionPlan | NoFit:
    request = PlacementRequest(chips=chips, **kw)  # type: ignore[arg-type]
    return plan_preemption(alloc, request, priority,
                           {JobKey(k): v for k, v in running.items()})


def test_scattered_free_chips_are_not_enough() -> None:
    # gen2-0000 [ a: s00-s17 | b: s18-s35 ]   gen2-0001 [ c: s00-s17 | 72 free ]
    # 144 chips: freeing `c` alone gives 144 in gen2-0001 (one domain) -> one victim, not a+b.
    alloc = cluster(2, {"a": [(0, range(18))], "b": [(0, range(18, 36))],
                        "c": [(1, range(18))]})
    got = plan(alloc, 144, 5, {"a": 0, "b": 0, "c": 0})
    assert isinstance(got, PreemptionPlan) and got.victims == ("c",)
    assert got.placement.ultraservers == ("gen2-0001",)


def test_never_a_scattered_set_that_does_not_fit() -> None:
    # gen2-0000 [ lo: s00-s08 | hi: s09-s35 ]   gen2-0001 [ lo2: s00-s08 | hi2: s09-s35 ]
    # 72 chips: evicting lo and lo2 frees 72 chips, but 36 per UltraServer: useless -> NoFit.
    alloc = cluster(2, {"lo": [(0, range(9))], "hi": [(0, range(9, 36))],
                        "lo2": [(1, range(9))], "hi2": [(1, range(9, 36))]})
    got = plan(alloc, 72, 5, {"lo": 0, "lo2": 0, "hi": 9, "hi2": 9})
    assert isinstance(got, NoFit) and got.kind == "NoCapacity"
    # Nothing was changed by planning.
    assert set(alloc.allocations()) == {"lo", "hi", "lo2", "hi2"}


def test_equal_priority_is_never_a_victim() -> None:
    alloc = cluster(1, {"a": [(0, range(36))]})
    assert isinstance(plan(alloc, 4, 0, {"a": 0}), NoFit)


def test_fewest_victims_then_fewest_chips() -> None:
    # gen2-0000 [ s1 s00 | s2 s01 | mid s02-s03 | big s04-s35 ]  all priority 0.
    alloc = cluster(1, {"s1": [(0, range(1))], "s2": [(0, range(1, 2))],
                        "mid": [(0, range(2, 4))], "big": [(0, range(4, 36))]})
    running = {"s1": 0, "s2": 0, "mid": 0, "big": 0}
    # 8 chips: one victim beats two (s1+s2); of the single victims `mid` has the fewest chips.
    got = plan(alloc, 8, 5, running)
    assert isinstance(got, PreemptionPlan) and got.victims == ("mid",)
    # 12 chips: only `big` alone frees enough; two victims (mid + s1) also would, but one wins.
    got = plan(alloc, 12, 5, running)
    assert isinstance(got, PreemptionPlan) and got.victims == ("big",)
    # 12 chips with `big` protected: the smallest pair that fits.
    got = plan(alloc, 12, 5, {"s1": 0, "s2": 0, "mid": 0, "big": 9})
    assert isinstance(got, PreemptionPlan) and got.victims == ("mid", "s1")


def test_prefers_the_lower_priority_victim_on_a_tie() -> None:
    # gen2-0000 [ a (prio 3) ]   gen2-0001 [ b (prio 1) ]
    alloc = cluster(2, {"a": [(0, range(36))], "b": [(1, range(36))]})
    got = plan(alloc, 144, 5, {"a": 3, "b": 1})
    assert isinstance(got, PreemptionPlan) and got.victims == ("b",)


def test_big_gang_clears_whole_ultraservers_in_one_block() -> None:
    # block-000: gen2-0000 [x]  gen2-0001 [y]     block-001: gen2-0002 [z]  gen2-0003 [w: 4 chips]
    # 288 chips: block-001 needs z + w (2 victims, 148 chips); block-000 needs x + y (288 chips).
    alloc = cluster(4, {"x": [(0, range(36))], "y": [(1, range(36))], "z": [(2, range(36))],
                        "w": [(3, range(1))]}, per_block=2)
    got = plan(alloc, 288, 5, {"x": 0, "y": 0, "z": 0, "w": 0})
    assert isinstance(got, PreemptionPlan) and got.victims == ("w", "z")
    assert got.placement.ultraservers == ("gen2-0002", "gen2-0003")
    assert got.placement.level == "network-1"


def test_no_victims_needed_when_it_fits() -> None:
    alloc = cluster(1, {})
    got = plan(alloc, 4, 0, {})
    assert isinstance(got, PreemptionPlan) and got.victims == ()
    assert isinstance(got.placement, Placement)


def test_unsatisfiable_is_passed_through() -> None:
    alloc = cluster(1, {"a": [(0, range(36))]})
    got = plan(alloc, 300, 5, {"a": 0}, required_level="ultraserver")
    assert isinstance(got, NoFit) and got.kind == "Unsatisfiable"
