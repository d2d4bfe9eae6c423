"""Preemption, kill -9 recovery, chip failures and draining, on a real API server."""

from __future__ import annotations

import pytest

from tests.integration.operator_harness import Harness


def chips_of(op: Harness, name: str) -> set[str]:
    return set(op.get(name)["status"]["allocation"]["chips"])


def test_preemption_evicts_lower_priority_and_keeps_its_checkpoint(op: Harness) -> None:
    # gen2-a [low 144] -> high (144, priority 10) arrives: low is Preempted, keeps its progress.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("low", 144, priority=0, topology={"requiredLevel": "ultraserver"})
    op.phase("low", "Admitted")
    op.set_status("low", {"phase": "Running", "progress": {"completedSteps": 40,
                                                           "checkpointedSteps": 30}})
    op.job("high", 144, priority=10, topology={"requiredLevel": "ultraserver"})
    op.phase("high", "Admitted")
    low = op.wait("low preempted", lambda: (lambda b: b if b["status"]["phase"] in (
        "Preempted", "Pending") else None)(op.get("low")))
    assert low["status"]["preemptions"] == 1
    assert low["status"]["progress"]["checkpointedSteps"] == 30
    assert not low["status"].get("allocation")
    assert any(c["type"] == "Preempted" and c["status"] == "True"
               for c in low["status"]["conditions"])
    reasons = op.env.kubectl("get", "events", "-n", op.ns, "-o",
                             "jsonpath={.items[*].reason}").stdout
    assert "Preempted" in reasons
    op.set_status("high", {"phase": "Succeeded"})
    readmitted = op.phase("low", "Admitted")
    assert readmitted["status"]["attempt"] == 2
    assert readmitted["status"]["progress"]["checkpointedSteps"] == 30


def test_kill9_restart_keeps_allocations_and_never_double_allocates(op: Harness) -> None:
    # gen2-a, gen2-b: four 72-chip jobs fill the fleet; kill -9; restart; a fifth must wait.
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    op.start()
    for i in range(4):
        op.job(f"j{i}", 72, topology={"requiredLevel": "ultraserver"})
    for i in range(4):
        op.phase(f"j{i}", "Admitted")
    before = {f"j{i}": chips_of(op, f"j{i}") for i in range(4)}
    op.kill9()
    op.job("late", 72)
    op.start()
    late = op.phase("late", "Pending")
    assert late["status"]["reason"] == "NoCapacity"
    after = {f"j{i}": chips_of(op, f"j{i}") for i in range(4)}
    assert after == before
    op.delete("j1")
    op.phase("late", "Admitted")
    assert chips_of(op, "late") == before["j1"] or not (chips_of(op, "late") & set().union(
        before["j0"], before["j2"], before["j3"]))


@pytest.mark.parametrize(
    ("policy", "phase", "chips_change"),
    [("Fail", "Failed", None), ("RestartAll", "Admitted", "new"),
     ("ReplaceAffected", "Admitted", "one")],
)
def test_chip_failure_applies_the_failure_policy(op: Harness, policy: str, phase: str,
                                                 chips_change: str | None) -> None:
    # gen2-a: a 16-chip job; one of its chips fails.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("train", 16, failurePolicy=policy)
    first = op.phase("train", "Admitted")
    old = set(first["status"]["allocation"]["chips"])
    victim = sorted(old)[0]
    op.patch_ultraserver(f"{op.ns}-a", {"failedChips": [victim.split("/", 1)[1]]})
    if policy == "Fail":
        body = op.phase("train", "Failed")
        assert body["status"]["reason"] == "ChipFailed" and victim in body["status"]["message"]
        return
    body = op.wait("a new allocation", lambda: (lambda b: b if b["status"].get("phase") ==
                   "Admitted" and b["status"].get("attempt") == 2 else None)(op.get("train")))
    new = set(body["status"]["allocation"]["chips"])
    assert victim not in new and len(new) == 16 and body["status"]["restarts"] == 1
    if chips_change == "one":
        assert len(new - old) == 1


def test_cordon_with_requeue_drain_moves_jobs(op: Harness) -> None:
    op.ultraserver(f"{op.ns}-a", drainPolicy="Requeue")
    op.ultraserver(f"{op.ns}-b", drainPolicy="Wait")
    op.start()
    op.job("x", 144, topology={"requiredLevel": "ultraserver"})
    op.job("y", 144, topology={"requiredLevel": "ultraserver"})
    op.phase("x", "Admitted")
    op.phase("y", "Admitted")
    on = {n: op.get(n)["status"]["allocation"]["ultraServers"][0] for n in ("x", "y")}
    waiter = next(n for n, us in on.items() if us.endswith("-b"))
    mover = next(n for n, us in on.items() if us.endswith("-a"))
    op.patch_ultraserver(f"{op.ns}-b", {"schedulable": False})
    op.patch_ultraserver(f"{op.ns}-a", {"schedulable": False})
    moved = op.wait("drained", lambda: (lambda b: b if b["status"]["phase"] in (
        "Preempted", "Pending") else None)(op.get(mover)))
    assert any(c["type"] == "Preempted" and c["reason"] == "Drained"
               for c in moved["status"]["conditions"])
    assert op.get(waiter)["status"]["phase"] == "Admitted"  # Wait: keeps running
    op.patch_ultraserver(f"{op.ns}-a", {"schedulable": True})
    op.phase(mover, "Admitted")
