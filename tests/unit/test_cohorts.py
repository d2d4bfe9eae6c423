"""Hierarchical cohorts: borrowing bounded at every level, reclaim through levels, fair shares
water-filled level by level, and parents that form a cycle refused.

Fleets are Trn3 Gen2 UltraServers (144 chips each). The trees are drawn above each case:
cohorts in capitals of their own (`org`, `ml`, `web`), queues as single letters.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_quotas import job, run
from ultraplane.hardware.topology import build_fleet
from ultraplane.placement.allocator import Allocator
from ultraplane.policies.cohorts import CohortCycleError, CohortSpec, CohortTree, check_parents
from ultraplane.policies.fairshares import wanted_fair_shares
from ultraplane.policies.quotas import NO_QUOTA, QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions

GEN2 = "trn3-gen2"


def q(name: str, chips: int, cohort: str, **kw: object) -> QueueSpec:
    return QueueSpec(name, {GEN2: chips}, cohort=cohort, **kw)  # type: ignore[arg-type]


def c(name: str, parent: str | None = None, chips: int = 0, **kw: object) -> CohortSpec:
    return CohortSpec(name, parent, {GEN2: chips} if chips else {}, **kw)  # type: ignore[arg-type]


def fleet(queues: list[QueueSpec], cohorts: list[CohortSpec], count: int) -> Admissions:
    return Admissions(Allocator(build_fleet(GEN2, count)), reservation=False,
                      quotas=QuotaBook(queues, cohorts))


# org
# ├── ml (borrowingLimit 72)  A 144, B 0
# └── web                     W 288 (idle)
TWO_LEVELS = ([q("A", 144, "ml"), q("B", 0, "ml"), q("W", 288, "web")],
              [c("org"), c("ml", "org", borrowing_limit=72), c("web", "org")])


def test_a_queue_borrows_within_its_cohort_then_from_the_parent_within_each_limit() -> None:
    # ml's subtree quota is A's 144; ml may take 72 more from org (web's idle 288): A fills
    # its 144, borrows 72 through ml, and no more, though web has 216 chips idle.
    adm = fleet(*TWO_LEVELS, count=4)
    admitted, pending, _ = run(adm, job("a1", "A", 144), job("a2", "A", 72), job("a3", "A", 4))
    assert admitted == ["a1", "a2"] and pending == {"a3": NO_QUOTA}
    book = adm.quotas
    assert book is not None and book.borrowed("A") == 72
    # B (nominal 0) borrows through ml too, whose limit A has used up
    assert book.room(book.queues["B"], GEN2) == 0


def test_a_lending_limit_on_a_cohort_keeps_the_rest_for_its_subtree() -> None:
    # org ── ml: A 144 ; org ── web (lendingLimit 72): W 288, idle. A may take 144 + 72.
    queues = [q("A", 144, "ml"), q("W", 288, "web")]
    cohorts = [c("org"), c("ml", "org"), c("web", "org", lending_limit=72)]
    adm = fleet(queues, cohorts, count=4)
    admitted, pending, _ = run(adm, job("a1", "A", 144), job("a2", "A", 72), job("a3", "A", 4))
    assert admitted == ["a1", "a2"] and pending == {"a3": NO_QUOTA}


def test_a_parent_cohorts_own_pool_is_shared_by_its_subtree() -> None:
    # org (nominal 144 of its own) ── ml: A 144. A may use org's pool: 288 in all.
    adm = fleet([q("A", 144, "ml")], [c("org", chips=144), c("ml", "org")], count=3)
    admitted, pending, _ = run(adm, job("a1", "A", 144), job("a2", "A", 144), job("a3", "A", 4))
    assert admitted == ["a1", "a2"] and pending == {"a3": NO_QUOTA}


def test_reclaim_reaches_a_borrower_of_another_team_only_when_its_team_borrows() -> None:
    # org ── ml: A 144, B 144 ; org ── web: W 288
    # W borrows ml's idle 144 (web takes more than it is given: 432 > 288); A's job runs on
    # the free UltraServer, and B, within its nominal quota, reclaims the borrowed one.
    queues = [q("A", 144, "ml"), q("B", 144, "ml"), q("W", 288, "web")]
    cohorts = [c("org"), c("ml", "org"), c("web", "org")]
    adm = fleet(queues, cohorts, count=4)
    run(adm, job("w1", "W", 144), job("w2", "W", 144), job("w3", "W", 144))
    admitted, _, preempted = run(adm, job("a1", "A", 144), job("b1", "B", 144))
    assert admitted == ["a1", "b1"] and preempted == [("w3", "b1")]


def test_no_reclaim_of_a_team_that_borrows_only_within_itself() -> None:
    # gen2-0000 [ w1 144 ]  gen2-0001 [ w2 144 ]
    # org ── ml: A 144 ; org ── web: V 144, W 144. W borrows V's idle quota inside web, so
    # web takes no more than it is given: A, within its nominal quota, has no claim on W
    # (what A lends lies idle in org); V, of web itself, reclaims its quota from W.
    queues = [q("A", 144, "ml"), q("V", 144, "web"), q("W", 144, "web")]
    cohorts = [c("org"), c("ml", "org"), c("web", "org")]
    adm = fleet(queues, cohorts, count=2)
    run(adm, job("w1", "W", 144), job("w2", "W", 144))
    admitted, pending, preempted = run(adm, job("a1", "A", 144))
    assert (admitted, preempted) == ([], []) and pending == {"a1": "NoCapacity"}
    admitted, _, preempted = run(adm, job("v1", "V", 144))
    assert admitted == ["v1"] and preempted == [("w2", "v1")]


def test_fair_shares_are_water_filled_level_by_level() -> None:
    # org (576 chips nominal in all)
    # ├── ml (weight 3): A 144, B 144, both want everything
    # └── web (weight 1): W 288, wants everything
    # org's level: ml 432, web 144; ml's level: A 216, B 216.
    queues = [q("A", 144, "ml"), q("B", 144, "ml"), q("W", 288, "web")]
    book = QuotaBook(queues, [c("org"), c("ml", "org", weight=3.0), c("web", "org")])
    shares = wanted_fair_shares(book, {("A", "x"): 1000, ("B", "x"): 1000, ("W", "x"): 1000})
    assert shares == pytest.approx({"A": 216.0, "B": 216.0, "W": 144.0})
    # a team capped at its demand frees the rest for the other
    shares = wanted_fair_shares(book, {("A", "x"): 20, ("B", "x"): 40, ("W", "x"): 1000})
    assert shares == pytest.approx({"A": 20.0, "B": 40.0, "W": 516.0})


def test_parents_that_form_a_cycle_are_refused_with_the_cycle_named() -> None:
    with pytest.raises(CohortCycleError, match="cycle: a -> b -> c -> a"):
        check_parents([c("a", "b"), c("b", "c"), c("c", "a")])
    with pytest.raises(CohortCycleError, match="itself"):
        c("a", "a")
    book = QuotaBook([q("A", 144, "a")], [c("a")])
    with pytest.raises(CohortCycleError):
        book.replace(book.specs, [c("a", "b"), c("b", "a")])
    assert book.tree.root("a") == "a"  # nothing changed


def test_flat_cohorts_are_a_tree_of_roots() -> None:
    tree = CohortTree({"all": [q("A", 144, "all"), q("B", 72, "all", lending_limit=36)]})
    assert tree.flat and tree.root("all") == "all"
    # the pool is A's 144 and the 36 B lends; A holding 144 leaves B's 36 idle
    assert tree.available("all", GEN2, lambda name, p: {"A": 144}.get(name, 0)) == 36
    assert tree.available("all", GEN2, lambda name, p: {"A": 180}.get(name, 0)) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABCD"), st.sampled_from([4, 36, 72, 144])),
                min_size=1, max_size=14),
       st.sampled_from([None, 0, 72]), st.sampled_from([None, 72, 144]))
def test_no_borrower_goes_past_a_limit_at_any_level(
        jobs: list[tuple[str, int]], ml_borrow: int | None, a_borrow: int | None) -> None:
    # org (360 nominal in all)
    # ├── ml (borrowingLimit ml_borrow): A 144 (borrowingLimit a_borrow), B 72
    # └── web: C 144, D 0
    # on 4 UltraServers (576 chips, more than the quotas). Whenever a job is admitted that
    # takes its queue over nominal (it borrows), every level it borrows through is within
    # its limit. (A queue within nominal takes its own quota back even when lent: on idle
    # chips, as here, or by reclaim; that is a guarantee, not borrowing.)
    nominal = {"A": 144, "B": 72, "C": 144, "D": 0}
    queues = [q("A", 144, "ml", borrowing_limit=a_borrow), q("B", 72, "ml"),
              q("C", 144, "web"), q("D", 0, "web")]
    cohorts = [c("org"), c("ml", "org", borrowing_limit=ml_borrow), c("web", "org")]
    adm = fleet(queues, cohorts, count=4)
    for i, (queue, chips) in enumerate(jobs):
        admitted, _, _ = run(adm, job(f"j{i}", queue, chips))
        book = adm.quotas
        assert book is not None
        used = {n: book.used(n) for n in "ABCD"}
        if f"j{i}" not in admitted or used[queue] <= nominal[queue]:
            continue
        if a_borrow is not None:
            assert used["A"] <= 144 + a_borrow
        if ml_borrow is not None and queue in "AB":
            assert used["A"] + used["B"] <= 216 + ml_borrow
        assert sum(used.values()) <= 360
