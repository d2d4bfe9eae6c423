"""A fair share that decays: a cohort's queues' recent usage, halved every half-life, puts
them behind other borrowers and first among fair-sharing victims; off, nothing changes.

One Trn3 Gen2 UltraServer (144 chips); cohort `all`: A and B with no nominal quota of their
own, C with 144 it does not use (the borrowers' pool).
"""

from __future__ import annotations

import math

import pytest

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.cohorts import CohortSpec
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
HOUR = 3600.0
_seq = iter(range(1_000_000))


def book(half_life: float | None) -> QuotaBook:
    queues = [QueueSpec(n, {GEN2: chips}, cohort="all")
              for n, chips in (("A", 0), ("B", 0), ("C", 144))]
    return QuotaBook(queues, [CohortSpec("all", usage_half_life_s=half_life)])


def job(key: str, queue: str, chips: int = 144) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips, required_level="ultraserver"),
                     0, next(_seq), queue=queue)


def test_usage_halves_every_half_life() -> None:
    adm = Admissions(Allocator(build_fleet(GEN2, 1)), reservation=False, quotas=book(HOUR))
    quotas = adm.quotas
    assert quotas is not None
    adm.submit(job("a1", "A"))
    assert [a.key for a in adm.cycle(0.0).admitted] == ["a1"]
    adm.cycle(HOUR)  # 144 chips held for one half-life
    tau = HOUR / math.log(2)
    assert quotas.decayed_usage("A") == pytest.approx(144 * tau * 0.5)
    assert quotas.recent_chips("A") == pytest.approx(72.0)
    adm.finished(JobKey("a1"), "Succeeded")
    adm.cycle(HOUR + 1)  # counted until this cycle, then nothing held
    quotas.advance(2 * HOUR + 1)  # (a cycle with nothing waiting may not ask the book)
    assert quotas.recent_chips("A") == pytest.approx(
        (72.0 * 2 ** (-1 / HOUR) + 144 * (1 - 2 ** (-1 / HOUR))) / 2, rel=1e-6)
    assert quotas.recent_chips("B") == 0.0


@pytest.mark.parametrize(("half_life", "first"), [(None, "a2"), (HOUR, "b1")])
def test_a_recent_borrower_borrows_after_one_that_had_nothing(half_life: float | None,
                                                              first: str) -> None:
    # [ a1 144, borrowed ] for an hour; then A and B (A's job ahead in the queue) each ask
    # for the whole UltraServer. Without memory both would borrow 144: A's job goes first.
    # With a one-hour half-life A has held 72 chips on average: B's goes first.
    adm = Admissions(Allocator(build_fleet(GEN2, 1)), reservation=False,
                     quotas=book(half_life))
    adm.submit(job("a1", "A"))
    adm.cycle(0.0)
    adm.cycle(HOUR - 1)
    adm.finished(JobKey("a1"), "Succeeded")
    adm.submit(job("a2", "A"))
    adm.submit(job("b1", "B"))
    assert [a.key for a in adm.cycle(HOUR).admitted] == [first]


def test_without_a_clock_or_a_half_life_nothing_is_remembered() -> None:
    quotas = book(None)
    quotas.advance(0.0)
    quotas.advance(HOUR)
    assert quotas.decayed_usage("A") == 0.0 and quotas.recent_chips("A") == 0.0
    with pytest.raises(ValueError, match="half-life"):
        CohortSpec("all", usage_half_life_s=0.0)


@pytest.mark.parametrize(("half_life", "victim"), [(None, "b3"), (HOUR, "a1")])
def test_the_most_recent_user_gives_first_to_fair_sharing(half_life: float | None,
                                                          victim: str) -> None:
    # Five UltraServers (720 chips); cohort `org` with a pool of 144 of its own, and its
    # queues A 144, B 144 and C 288 nominal (weights 1, 1, 4).
    #   t=0     A: a1 a2 a3 (216, 72 from org's pool)   B: b1 b2 (144)
    #   t=1800  B: b3 (216, 72 from org's pool)
    #   t=1810  C: c1..c4 (its 288): the fleet and the quotas are full
    #   t=3600  C: c5 c6 c7, beyond its quota; fair shares A 120, B 120, C 480: fair
    #           sharing takes one 72-chip job of A or B for c5.
    # Without memory c5's victim is the job that loses least work (b3, 1800 s old). With a
    # one-hour half-life A has used more of late (216 chips for the hour, B 144 and then
    # 216 for half of it): A gives first.
    queues = [QueueSpec("A", {GEN2: 144}, cohort="org"), QueueSpec("B", {GEN2: 144}, cohort="org"),
              QueueSpec("C", {GEN2: 288}, cohort="org", weight=4.0)]
    org = CohortSpec("org", nominal={GEN2: 144}, usage_half_life_s=half_life)
    adm = Admissions(Allocator(build_fleet(GEN2, 5)), reservation=False,
                     quotas=QuotaBook(queues, [org]))
    steps: list[tuple[float, list[QueuedJob]]] = [
        (0.0, [job(k, "A", 72) for k in ("a1", "a2", "a3")] + [job(k, "B", 72) for k in ("b1", "b2")]),
        (1800.0, [job("b3", "B", 72)]), (1810.0, [job(f"c{i}", "C", 72) for i in range(1, 5)])]
    for t, jobs in steps:
        for j in jobs:
            adm.submit(j)
        assert len(adm.cycle(t).admitted) == len(jobs)
    for k in ("c5", "c6", "c7"):
        adm.submit(job(k, "C", 72))
    d = adm.cycle(HOUR)
    assert (victim, "c5", True) in [(p.key, p.by, p.fair_sharing) for p in d.preempted]
