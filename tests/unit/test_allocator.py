"""Allocator behaviour, table-driven. Each case draws the cluster it starts from.

Drawing legend (Trn3 Gen2 unless said otherwise: 36 servers x 4 chips in 2 racks of 18):
`#` a server fully used, `.` a whole free server, a digit = free chips in that server,
`x` failed chip, `C` cordoned server. Blocks are network-1 groups of UltraServers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey, chip_id
from ultraplane.placement.allocator import (
    AllocationConflict,
    Allocator,
    NoFit,
    Placement,
    PlacementRequest,
)


class Cluster:
    """Fluent builder: a fleet, then jobs holding chips, then health changes."""

    def __init__(self, profile: str = "trn3-gen2", count: int = 1, *, per_block: int = 16,
                 policy: str = "ultraplane") -> None:
        self.topo = build_fleet(profile, count, per_block=per_block)
        self.alloc = Allocator(self.topo, policy=policy)  # type: ignore[arg-type]
        self.cps = self.topo.ultraservers[0].spec.chips_per_server
        self._n = 0

    def mixed_with(self, profile: str, count: int) -> Cluster:
        """Add `count` UltraServers of another profile, in the same network block."""
        extra = build_fleet(profile, count, per_block=1000)
        for us in extra.ultraservers:
            self.alloc.upsert_ultraserver(us)
        self.topo = self.alloc.topology
        return self

    def used(self, us: int, servers: Iterable[int], chips: int | None = None) -> Cluster:
        """A job holds the first `chips` chips (default all) of each listed server."""
        name = self.topo.ultraservers[us].name
        ids = [chip_id(name, s, c) for s in servers for c in range(chips or self.cps)]
        self._n += 1
        self.alloc.assign(JobKey(f"pre-{self._n}"), ids)
        return self

    def full(self, *us: int) -> Cluster:
        for u in us:
            self.used(u, range(self.topo.ultraservers[u].server_count))
        return self

    def failed(self, us: int, server: int, chip: int) -> Cluster:
        self.alloc.set_chip_failed(chip_id(self.topo.ultraservers[us].name, server, chip), True)
        return self

    def cordoned(self, us: int, server: int) -> Cluster:
        self.alloc.set_server_cordoned(self.topo.ultraservers[us].name, server, True)
        return self

    def unschedulable(self, us: int) -> Cluster:
        self.alloc.set_schedulable(self.topo.ultraservers[us].name, False)
        return self


@dataclass
class Case:
    name: str
    cluster: Cluster
    request: PlacementRequest
    ultraservers: tuple[str, ...] = ()
    level: str | None = None
    servers: tuple[str, ...] | None = None
    nofit: str | None = None
    absent: set[str] = field(default_factory=set)


def req(chips: int, **kw: object) -> PlacementRequest:
    return PlacementRequest(chips=chips, **kw)  # type: ignore[arg-type]


CASES = [
    # gen2-0000 [rack0 ##################  rack1 ####.............. ]  (100 used, 44 free)
    # gen2-0001 [rack0 ..................  rack1 .................. ]  idle
    # 16 chips: best fit is the fuller UltraServer; the idle one stays whole.
    Case("best-fit-ultraserver", Cluster(count=2).used(0, range(25)), req(16),
         ("gen2-0000",), "rack"),
    # gen2-0000 [ 1 . . . ... ]  s00 has 1 free chip (3 used)
    # 1 chip: packs the partly used server, breaks nothing whole.
    Case("pack-partial-server", Cluster().used(0, [0], chips=3), req(1),
         ("gen2-0000",), "server", ("gen2-0000/s00",)),
    # gen2-0000 [ 1 . . . ... ]  4 chips want one server: s00 cannot, s01 is the next whole one.
    Case("tightest-server", Cluster().used(0, [0], chips=3), req(4),
         ("gen2-0000",), "server", ("gen2-0000/s01",)),
    # gen2-0000 [rack0 ###############...  rack1 .................. ]
    # 20 chips, required rack: rack0 has 12 free, so rack1.
    Case("required-rack", Cluster().used(0, range(15)), req(20, required_level="rack"),
         ("gen2-0000",), "rack"),
    # gen2-0000 all used but s00 (c01 failed: 3 usable) and s01 (cordoned).
    Case("failed-and-cordoned-3", Cluster().used(0, range(2, 36)).failed(0, 0, 1).cordoned(0, 1),
         req(3), ("gen2-0000",), "server", ("gen2-0000/s00",), absent={"gen2-0000/s00/c01"}),
    Case("failed-and-cordoned-4", Cluster().used(0, range(2, 36)).failed(0, 0, 1).cordoned(0, 1),
         req(4), nofit="NoCapacity"),
    # gen2-0000 [ 44 free, unschedulable ]  gen2-0001 [ idle ]  -> the schedulable one.
    Case("unschedulable-skipped", Cluster(count=2).used(0, range(25)).unschedulable(0), req(16),
         ("gen2-0001",), "rack"),
    # block-000: gen2-0000 #  gen2-0001 #  gen2-0002 .  gen2-0003 .    (2 idle)
    # block-001: gen2-0004 #  gen2-0005 .  gen2-0006 .  gen2-0007 .    (3 idle)
    # 288 chips = 2 whole UltraServers: the block with the fewest idle that still fits.
    Case("big-best-fit-block", Cluster(count=8, per_block=4).full(0, 1, 4), req(288),
         ("gen2-0002", "gen2-0003"), "network-1"),
    # block-000: # .   block-001: # .   -> 288 spans blocks (cluster level) unless required.
    Case("big-widens", Cluster(count=4, per_block=2).full(0, 2), req(288),
         ("gen2-0001", "gen2-0003"), "cluster"),
    Case("big-required-block", Cluster(count=4, per_block=2).full(0, 2),
         req(288, required_level="block"), nofit="NoCapacity"),
    # block-000: . .   block-001: # .   -> a 1-chip job breaks the idle UltraServer of the block
    # with fewer idle ones, keeping block-000 whole for a 288-chip gang.
    Case("small-breaks-least-valuable-block", Cluster(count=4, per_block=2).full(2), req(1),
         ("gen2-0003",), "server"),
    # block-000: gen2-0000 # (one whole-UltraServer gang)  gen2-0001 .  gen2-0002 .
    # block-001: gen2-0003 # (two small gangs: mixed)      gen2-0004 .  gen2-0005 .
    # 1 chip must break an idle UltraServer: in the block where small gangs already live,
    # so block-000 can come back whole when its large gang ends.
    Case("small-breaks-idle-where-small-gangs-live", Cluster(count=6, per_block=3).full(0)
         .used(3, range(18)).used(3, range(18, 36)), req(1), ("gen2-0004",), "server"),
    # ... and a 288-chip gang choosing between blocks with equally many idle UltraServers
    # takes the mixed block's, for the same reason.
    Case("big-tie-goes-where-small-gangs-live", Cluster(count=6, per_block=3).full(0)
         .used(3, range(18)).used(3, range(18, 36)), req(288),
         ("gen2-0004", "gen2-0005"), "network-1"),
    # block-000: . . .   block-001: # . .   a whole-UltraServer gang is a large gang: the
    # block with the fewest idle UltraServers (best fit), as for 288+ chips.
    Case("whole-ultraserver-best-fit-block", Cluster(count=6, per_block=3).full(3), req(144),
         ("gen2-0004",), "ultraserver"),
    # gen2-0000 60 free, gen2-0001 60 free, same block: 100 chips fit one UltraServer, so by
    # default they wait for one (locality by default) ...
    Case("local-by-default", Cluster(count=2).used(0, range(21)).used(1, range(21)), req(100),
         nofit="NoCapacity"),
    # ... and spread over both only when the spec opts in: a required level above the
    # UltraServer, or mode Unconstrained ...
    Case("spread-when-required-level-allows", Cluster(count=2).used(0, range(21))
         .used(1, range(21)), req(100, required_level="block"),
         ("gen2-0000", "gen2-0001"), "network-1"),
    Case("spread-when-unconstrained", Cluster(count=2).used(0, range(21)).used(1, range(21)),
         req(100, mode="Unconstrained"), ("gen2-0000", "gen2-0001"), "network-1"),
    # ... (SplitWhenItPays is the scheduler's decision; the allocator alone keeps it local) ...
    Case("split-when-it-pays-is-local-in-the-allocator", Cluster(count=2).used(0, range(21))
         .used(1, range(21)), req(100, mode="SplitWhenItPays"), nofit="NoCapacity"),
    # trn2 (64 chips each) and gen2 side by side, gen2 full: 100 chips fit one gen2, so they
    # never take two trn2 UltraServers instead.
    Case("local-never-spans-smaller-ultraservers", Cluster().mixed_with("trn2", 2).full(0),
         req(100), nofit="NoCapacity"),
    # ... but never when one UltraServer is required.
    Case("spread-not-across-required", Cluster(count=2).used(0, range(21)).used(1, range(21)),
         req(100, required_level="ultraserver"), nofit="NoCapacity"),
    # gen2-0000 [rack0 ########.......... rack1 ##########........]  72 free, no whole rack
    # gen2-0001 idle.  72 chips: span both racks of gen2-0000 and keep gen2-0001 whole ...
    Case("keeps-idle-ultraserver", Cluster(count=2).used(0, range(8)).used(0, range(18, 28)),
         req(72), ("gen2-0000",), "ultraserver"),
    # ... unless the request prefers rack locality.
    Case("preferred-rack-breaks-idle", Cluster(count=2).used(0, range(8)).used(0, range(18, 28)),
         req(72, preferred_level="rack"), ("gen2-0001",), "rack"),
    # block-000: gen2-0000 [20 servers used, 64 free]  gen2-0001 idle  gen2-0002 idle
    # 200 chips = one idle UltraServer + 56 on the partly used one; gen2-0002 stays idle
    # (it does not wait for, or break, a second idle UltraServer).
    Case("large-remainder-on-a-partly-used-ultraserver", Cluster(count=3).used(0, range(20)),
         req(200), ("gen2-0000", "gen2-0001"), "network-1"),
    # Unsatisfiable: more than a server, more than the fleet, not a whole-server multiple.
    Case("more-than-a-server", Cluster(), req(5, required_level="server"), nofit="Unsatisfiable"),
    Case("more-than-the-fleet", Cluster(count=2), req(289), nofit="Unsatisfiable"),
    Case("big-required-ultraserver", Cluster(count=2), req(288, required_level="ultraserver"),
         nofit="Unsatisfiable"),
    Case("whole-servers-multiple", Cluster(), req(6, whole_servers=True), nofit="Unsatisfiable"),
    # gen2-0000 [ 1 . . ... ]  whole_servers: 8 chips = two whole servers, s00 untouched.
    Case("whole-servers", Cluster().used(0, [0], chips=3), req(8, whole_servers=True),
         ("gen2-0000",), "rack", ("gen2-0000/s01", "gen2-0000/s02")),
    # trn2 [ inst0 16 | inst1 16 | inst2 16 | inst3 16 ]  16 chips = one instance (server).
    Case("trn2-instance", Cluster("trn2"), req(16), ("trn2-0000",), "server", ("trn2-0000/s00",)),
    Case("profile-missing", Cluster("trn2"), req(4, profile="trn3-gen2"), nofit="Unsatisfiable"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_placement_table(case: Case) -> None:
    before = dict(case.cluster.alloc.allocations())
    got = case.cluster.alloc.place(case.request)
    if case.nofit:
        assert isinstance(got, NoFit), got
        assert got.kind == case.nofit and got.message
    else:
        assert isinstance(got, Placement), got
        assert len(set(got.chip_ids)) == case.request.chips
        assert got.ultraservers == case.ultraservers
        assert got.level == case.level
        if case.servers is not None:
            assert got.servers == case.servers
        assert not case.absent & set(got.chip_ids)
        for cid in got.chip_ids:
            assert case.cluster.alloc.job_of(cid) is None
    assert dict(case.cluster.alloc.allocations()) == before  # place() is a query


def test_allocate_release_round_trip() -> None:
    alloc = Cluster(count=2).alloc
    a = alloc.allocate(JobKey("a"), req(72))
    b = alloc.allocate(JobKey("b"), req(144))
    assert isinstance(a, Placement) and isinstance(b, Placement)
    assert not set(a.chip_ids) & set(b.chip_ids)
    assert alloc.job_of(a.chip_ids[0]) == "a"
    assert alloc.release(JobKey("a")) == frozenset(a.chip_ids)
    assert alloc.release(JobKey("a")) == frozenset()
    assert alloc.job_of(a.chip_ids[0]) is None
    assert alloc.capacity().cluster.free == 144


def test_nofit_on_a_full_fleet_names_an_ultraserver_and_its_jobs() -> None:
    # gen2-0000 [ all # ]  gen2-0001 [ all # ]  (full UltraServers are not in the buckets)
    c = Cluster(count=2).full(0, 1)
    got = c.alloc.place(req(1))
    assert isinstance(got, NoFit) and got.kind == "NoCapacity"
    assert "gen2-0000, has 0 free chips" in got.message and got.blocking == ("pre-1",)
    c.unschedulable(0).unschedulable(1)
    got = c.alloc.place(req(1))
    assert isinstance(got, NoFit) and "is schedulable now" in got.message


def test_assign_conflicts() -> None:
    alloc = Cluster().alloc
    alloc.assign(JobKey("a"), ["gen2-0000/s00/c00"])
    with pytest.raises(AllocationConflict, match="already held by a"):
        alloc.assign(JobKey("b"), ["gen2-0000/s00/c00"])
    with pytest.raises(AllocationConflict, match="does not exist"):
        alloc.assign(JobKey("b"), ["gen2-0000/s40/c00"])
    with pytest.raises(AllocationConflict, match="already holds"):
        alloc.allocate(JobKey("a"), req(1))


def test_failed_allocated_chip_is_not_freed_on_release() -> None:
    alloc = Cluster().alloc
    p = alloc.allocate(JobKey("a"), req(4))
    assert isinstance(p, Placement)
    alloc.set_chip_failed(p.chip_ids[0], True)
    alloc.release(JobKey("a"))
    assert alloc.capacity().cluster.free == 143
    alloc.set_chip_failed(p.chip_ids[0], False)
    assert alloc.capacity().cluster.free == 144


def test_replace_keeps_the_other_chips_and_the_required_level() -> None:
    # gen2-0000 [rack0 .................. rack1 ..................]  job: 8 chips, required rack
    alloc = Cluster().alloc
    p = alloc.allocate(JobKey("a"), req(8, required_level="rack"))
    assert isinstance(p, Placement)
    lost = p.chip_ids[0]
    alloc.set_chip_failed(lost, True)
    q = alloc.replace(JobKey("a"), [lost])
    assert isinstance(q, Placement)
    assert len(q.chip_ids) == 8 and lost not in q.chip_ids
    assert set(p.chip_ids) - {lost} <= set(q.chip_ids)
    assert q.level in ("server", "rack")
    assert alloc.job_of(lost) is None


def test_replace_nofit_keeps_everything() -> None:
    # gen2-0000: s00 held by a (required server); every other chip used -> no spare in s00.
    c = Cluster()
    p = c.alloc.allocate(JobKey("a"), req(4, required_level="server"))
    c.used(0, range(1, 36))
    assert isinstance(p, Placement)
    got = c.alloc.replace(JobKey("a"), [p.chip_ids[0]])
    assert isinstance(got, NoFit) and got.kind == "NoCapacity"
    assert c.alloc.allocations()["a"] == p


def test_first_fit_policy_takes_chips_in_id_order() -> None:
    # gen2-0000 [ 1 . . ... ] with first-fit: 4 chips = s00/c03 + 3 chips of s01.
    c = Cluster(policy="first-fit").used(0, [0], chips=3)
    got = c.alloc.place(req(4))
    assert isinstance(got, Placement)
    assert got.chip_ids == ("gen2-0000/s00/c03", "gen2-0000/s01/c00", "gen2-0000/s01/c01",
                            "gen2-0000/s01/c02")
    # ... but a required server still holds: the first whole server.
    got = c.alloc.place(req(4, required_level="server"))
    assert isinstance(got, Placement) and got.servers == ("gen2-0000/s01",)


def test_capacity_counts_whole_domains_and_fits() -> None:
    # gen2-0000 [rack0 ##########........ rack1 ..................]  gen2-0001 idle
    c = Cluster(count=2).used(0, range(10))
    cap = c.alloc.capacity()
    assert (cap.cluster.total, cap.cluster.allocated, cap.cluster.free) == (288, 40, 248)
    first = cap.ultraservers[0]
    assert (first.free_whole_servers, first.free_whole_racks, first.free_whole_ultraservers) == (
        26, 1, 0)
    assert cap.fits[144] == 1 and cap.fits[72] == 2 + 1 and cap.fits[288] == 0
    assert cap.levels["network-1"][0].free == 248


def test_score_counts_what_a_placement_breaks() -> None:
    alloc = Cluster().alloc
    p = alloc.allocate(JobKey("a"), req(1))
    assert isinstance(p, Placement) and p.score == 4 + 72 + 144  # server, rack, UltraServer
    q = alloc.place(req(3))
    assert isinstance(q, Placement) and q.score == 0  # fills the broken server


def test_same_operations_same_placements() -> None:
    def run() -> list[tuple[str, ...]]:
        alloc = Cluster(count=3).alloc
        out = []
        for i, size in enumerate([1, 4, 36, 72, 3, 144, 16, 5]):
            p = alloc.allocate(JobKey(f"j{i}"), req(size))
            out.append(p.chip_ids if isinstance(p, Placement) else (p.kind,))
            if i % 3 == 2:
                alloc.release(JobKey(f"j{i - 1}"))
        return out
    assert run() == run()


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="chips must be a positive integer"):
        req(0)
    with pytest.raises(ValueError, match="unknown topology level"):
        req(1, required_level="pod")
    with pytest.raises(ValueError, match="unknown profile"):
        req(1, profile="trn9")
    assert req(1, required_level="block").required_level == "network-1"


def test_benchmark_quick_run_ends_with_one_json_line() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "allocator.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                          text=True, timeout=600, check=True)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(last) == {"chips", "ops", "placements_per_s", "p50_ms", "p99_ms", "peak_rss_mb",
                         "large_rejected", "first_fit_placements_per_s",
                         "first_fit_large_rejected", "best_fit_placements_per_s",
                         "best_fit_large_rejected"}
    assert last["chips"] == 160 * 144 and last["ops"] > 6_000
    assert last["placements_per_s"] > 0 and last["p50_ms"] <= last["p99_ms"]
