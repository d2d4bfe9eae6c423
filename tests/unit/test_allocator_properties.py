"""Allocator invariants under random operation sequences (hypothesis).

Small fleets so that every sequence reaches full and fragmented states:
    block-000: gen2-0000 gen2-0001     block-001: gen2-0002      (Trn3 Gen2, 144 chips each)
and a two-UltraServer Trn2 fleet (4 servers x 16 chips, one rack)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ultraplane.hardware.topology import Level, Topology, build_fleet, parse_level
from ultraplane.ids import JobKey, chip_id, parse_chip_id
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest

SIZES = [1, 2, 3, 4, 5, 8, 16, 36, 64, 72, 100, 144, 200, 288, 432]
LEVELS = [None, "server", "rack", "ultraserver", "block", "cluster"]

op = st.one_of(
    st.tuples(st.just("alloc"), st.sampled_from(SIZES), st.sampled_from(LEVELS), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 40)),
    st.tuples(st.just("fail"), st.integers(0, 2), st.integers(0, 35), st.integers(0, 15),
              st.booleans()),
    st.tuples(st.just("cordon"), st.integers(0, 2), st.integers(0, 35), st.booleans()),
)
fleets = st.sampled_from([("trn3-gen2", 3, 2), ("trn2", 2, 16)])


def _run(fleet: tuple[str, int, int], ops: list[tuple[Any, ...]],
         check: bool = True) -> list[tuple[str, ...]]:
    topo: Topology = build_fleet(fleet[0], fleet[1], per_block=fleet[2])
    alloc = Allocator(topo)
    held: dict[JobKey, frozenset[str]] = {}
    failed: set[str] = set()
    cordoned: set[tuple[str, int]] = set()
    trace: list[tuple[str, ...]] = []
    n = 0
    for o in ops:
        if o[0] == "alloc":
            _, size, level, whole = o
            request = PlacementRequest(chips=size, required_level=level, whole_servers=whole)
            before = dict(alloc.allocations())
            got = alloc.allocate(JobKey(f"j{n}"), request)
            bad = _bad(topo, failed, cordoned)
            if isinstance(got, Placement):
                chips = frozenset(got.chip_ids)
                trace.append(got.chip_ids)
                if check:
                    assert len(chips) == size == len(got.chip_ids)  # the whole gang, once
                    for other in held.values():
                        assert not chips & other  # no chip in two placements
                    assert not chips & bad  # never failed or cordoned
                    if level is not None:
                        assert parse_level(got.level) <= parse_level(level)
                    if whole:
                        cps = topo.ultraservers[0].spec.chips_per_server
                        assert all(sum(1 for c in chips if c.startswith(s + "/")) == cps
                                   for s in got.servers)
                held[JobKey(f"j{n}")] = chips
            else:
                trace.append((got.kind,))
                assert dict(alloc.allocations()) == before  # all or nothing
            n += 1
        elif o[0] == "release":
            key = JobKey(f"j{o[1]}")
            freed = alloc.release(key)
            assert freed == held.pop(key, frozenset())  # exactly the chips it held
        elif o[0] == "fail":
            _, u, s, c, is_failed = o
            us = topo.ultraservers[u % len(topo)]
            s %= us.server_count
            c %= us.spec.chips_per_server
            alloc.set_chip_failed(chip_id(us.name, s, c), is_failed)
            (failed.add if is_failed else failed.discard)(chip_id(us.name, s, c))
        else:
            _, u, s, is_cordoned = o
            us = topo.ultraservers[u % len(topo)]
            s %= us.server_count
            alloc.set_server_cordoned(us.name, s, is_cordoned)
            (cordoned.add if is_cordoned else cordoned.discard)((us.name, s))
        if check:
            _consistent(alloc, held, _bad(topo, failed, cordoned))
    return trace


def _bad(topo: Topology, failed: set[str], cordoned: set[tuple[str, int]]) -> set[str]:
    """Chips no new placement may use: failed ones and every chip of a cordoned server."""
    cps = topo.ultraservers[0].spec.chips_per_server
    return failed | {chip_id(us, s, c) for us, s in cordoned for c in range(cps)}


def _consistent(alloc: Allocator, held: dict[JobKey, frozenset[str]], bad: set[str]) -> None:
    cap = alloc.capacity()
    c = cap.cluster
    assert c.total == c.allocated + c.free + c.unusable
    assert c.allocated == sum(len(v) for v in held.values())
    assert {k: frozenset(p.chip_ids) for k, p in alloc.allocations().items()} == held
    for key, chips in held.items():
        for cid in list(chips)[:3]:
            assert alloc.job_of(cid) == key
    # Free chips are exactly the healthy, uncordoned chips nobody holds.
    used = set().union(*held.values()) if held else set()
    total_chips = c.total
    assert c.free == total_chips - len(used | bad)


@settings(max_examples=60, deadline=None)
@given(fleets, st.lists(op, max_size=40))
def test_invariants_hold_for_any_sequence(fleet: tuple[str, int, int],
                                          ops: list[tuple[Any, ...]]) -> None:
    _run(fleet, ops)


@settings(max_examples=25, deadline=None)
@given(fleets, st.lists(op, max_size=30))
def test_same_operations_give_the_same_placements(fleet: tuple[str, int, int],
                                                  ops: list[tuple[Any, ...]]) -> None:
    assert _run(fleet, ops, check=False) == _run(fleet, ops, check=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([1, 4, 16, 36, 72, 144]), min_size=1, max_size=12),
       st.sampled_from(["server", "rack", "ultraserver"]))
def test_required_level_never_crossed(sizes: list[int], level: str) -> None:
    alloc = Allocator(build_fleet("trn3-gen2", 2))
    for i, size in enumerate(sizes):
        got = alloc.allocate(JobKey(f"j{i}"), PlacementRequest(chips=size, required_level=level))
        if isinstance(got, NoFit):
            continue
        domains = {parse_chip_id(c)[0] for c in got.chip_ids}
        assert len(domains) == 1
        servers = {parse_chip_id(c)[1] for c in got.chip_ids}
        if level == "server":
            assert len(servers) == 1
        if level == "rack":
            assert len({s // 18 for s in servers}) == 1
        assert parse_level(got.level) <= parse_level(level) < Level(3)


def _indexes_match_a_rebuild(alloc: Allocator) -> None:
    """The incremental counters and best-fit buckets equal what a rebuild would compute."""
    from ultraplane.placement.slots import IDLE_CAP

    for pool in alloc._pools.values():
        filed = {slot: rank for rank, bucket in pool.us_buckets.items() for slot in bucket}
        for slot in pool.slots:
            free = [u & ~a for u, a in zip(slot.usable, slot.alloc, strict=True)]
            assert slot.free == free
            assert slot.nfree == [m.bit_count() for m in free]
            assert slot.total == sum(slot.nfree)
            assert slot.hist == [slot.nfree.count(k) for k in range(slot.cps + 1)]
            racks = [range(r * slot.spr, min(slot.n, (r + 1) * slot.spr))
                     for r in range(slot.nracks)]
            assert slot.rack_free == [sum(slot.nfree[s] for s in r) for r in racks]
            assert slot.rack_whole == [sum(free[s] == slot.full for s in r) for r in racks]
            assert slot.indexed == slot.keys()
            idle = slot.indexed is not None and slot.idle
            assert (slot in pool.block_idle[slot.block]) == idle
            if slot.indexed is None or not slot.total:  # full UltraServers are not filed
                assert slot not in filed and slot.rank == -1
                continue
            band = min(len(pool.block_idle[slot.block]), IDLE_CAP) * pool.band
            assert filed[slot] == slot.rank == band + slot.total
            ms, mr = slot.indexed[0], slot.indexed[1]
            assert slot in pool.server_buckets[ms * (1 << 20) + slot.rank]
            assert slot in pool.rack_buckets[mr * (1 << 20) + slot.rank]
        assert len(filed) == sum(len(b) for b in pool.server_buckets.values())
        assert len(filed) == sum(len(b) for b in pool.rack_buckets.values())
        for k, mask in enumerate(pool.server_masks):
            assert bool(pool.server_keys >> k & 1) == bool(mask)
        for k, mask in enumerate(pool.rack_masks):
            assert bool(pool.rack_keys >> k & 1) == bool(mask)
        for count, blocks in pool.blocks_by_idle.items():
            assert all(len(pool.block_idle[b]) == count for b in blocks)
        mixed: dict[tuple[str, ...], int] = {}
        for slot in pool.slots:
            if slot.indexed is not None and (len(slot.jobs) > 1 or any(
                    n < slot.cpu for n in slot.jobs.values())):
                mixed[slot.block] = mixed.get(slot.block, 0) + 1
        assert pool.block_mixed == mixed
        with_idle = {b for b, members in pool.block_idle.items() if members}
        assert {b: mixed.get(b, 0) for b in with_idle} == {
            b: k for k, blocks in pool.idle_by_mixed.items() for b in blocks}


@settings(max_examples=40, deadline=None)
@given(st.lists(op, max_size=40), st.lists(st.integers(0, 143), max_size=6))
def test_incremental_indexes_match_a_rebuild(ops: list[tuple[Any, ...]],
                                             adopted: list[int]) -> None:
    # block-000: gen2-0000 gen2-0001   block-001: gen2-0002; a job re-adopts chips (assign),
    # some of which may have failed since, then random operations run.
    alloc = Allocator(build_fleet("trn3-gen2", 3, per_block=2))
    alloc.set_chip_failed(chip_id("gen2-0001", 0, 0), True)
    chips = {chip_id("gen2-0001", c // 4, c % 4) for c in adopted}
    if chips:
        alloc.assign(JobKey("adopted"), chips)
    _indexes_match_a_rebuild(alloc)
    n = 0
    for o in ops:
        if o[0] == "alloc":
            _, size, level, whole = o
            alloc.allocate(JobKey(f"j{n}"), PlacementRequest(
                chips=size, required_level=level, whole_servers=whole))
            n += 1
        elif o[0] == "release":
            alloc.release(JobKey(f"j{o[1]}") if o[1] % 7 else JobKey("adopted"))
        elif o[0] == "fail":
            _, u, s, c, is_failed = o
            alloc.set_chip_failed(chip_id(f"gen2-{u % 3:04d}", s, c % 4), is_failed)
        else:
            _, u, s, is_cordoned = o
            alloc.set_server_cordoned(f"gen2-{u % 3:04d}", s, is_cordoned)
        _indexes_match_a_rebuild(alloc)
