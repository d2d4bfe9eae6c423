"""Power budgets that change while jobs run (the operator's and the API's case): a book with
no budget leaves the cycle as it was, and a budget created later counts what already runs.

Fleet: two Trn3 Gen2 UltraServers (144 chips each; assumed 300 W idle per chip, a 144-chip
job 90.5 kW over idle under the Predicted policy):

    gen2-0000 [ a 144 ]   gen2-0001 [ b? 144 ]
"""

from __future__ import annotations

from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.powerbook import NO_POWER, PowerBook
from ultraplane.policies.powerbudgets import BudgetSpec
from ultraplane.scheduling.admissions import Admissions
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
IDLE_US = 144 * 300.0


def job(key: str, seq: int) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=144), 0, seq)


def test_a_book_without_budgets_admits_as_if_there_were_none() -> None:
    book = PowerBook([], capping=False)
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False, power=book)
    assert not book.active
    for i in range(2):
        adm.submit(job(f"j{i}", i))
    assert [a.key for a in adm.cycle(0.0).admitted] == ["j0", "j1"]


def test_a_budget_created_later_counts_the_running_job_and_holds_the_next() -> None:
    book = PowerBook([], capping=False)
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False, power=book)
    adm.submit(job("a", 0))
    assert [x.key for x in adm.cycle(0.0).admitted] == ["a"]
    book.replace([BudgetSpec("hall", 2 * IDLE_US + 100e3)])
    assert book.active and book.members("hall") == {"gen2-0000", "gen2-0001"}
    [status] = book.status()
    assert 2 * IDLE_US + 90e3 < status.predicted_w < 2 * IDLE_US + 91e3  # a is counted
    adm.submit(job("b", 1))
    decided = adm.cycle(1.0)
    assert [(p.key, p.reason) for p in decided.pending] == [("b", NO_POWER)]
    assert "headroom in budget hall" in decided.pending[0].message
    book.replace([BudgetSpec("hall", 2 * IDLE_US + 200e3)])  # raised: b fits now
    assert [x.key for x in adm.cycle(2.0).admitted] == ["b"]
    book.replace([])  # removed: the cycle is today's again
    assert not book.active and book.status() == []


def test_a_job_a_budget_cannot_hold_is_placed_beside_it() -> None:
    # gen2-0000 [ a 144 ] [ b: row-0 has no headroom left ]   gen2-0001 [ b lands here ]
    # row-0 covers gen2-0000 alone: idle + 70 kW (a: 62.8 kW over idle, b: 25.1 kW more);
    # the rest of the fleet has no budget.
    book = PowerBook([BudgetSpec("row-0", IDLE_US + 70e3, ultraservers=("gen2-0000",))],
                     capping=False)
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=False, power=book)
    adm.submit(QueuedJob(JobKey("a"), PlacementRequest(chips=100), 0, 0))
    [a] = adm.cycle(0.0).admitted
    assert {us for p in a.placements for us in p.ultraservers} == {"gen2-0000"}
    adm.submit(QueuedJob(JobKey("b"), PlacementRequest(chips=40), 0, 1))
    decided = adm.cycle(1.0)
    [b] = decided.admitted  # best fit would pick gen2-0000's 44 free chips: over row-0
    assert {us for p in b.placements for us in p.ultraservers} == {"gen2-0001"}
    assert not decided.pending
