"""Fair-sharing preemption on a real API server, through the operator.

Fleet (the test's own, labelled with its namespace), one cohort of three queues:

    gen2-0 [ 144 ]   gen2-1 [ 144 ]   gen2-2 [ 144 ]   gen2-3 [ 144 ]
    queue A: nominal 144, namespace A (its default queue)
    queue B: nominal 144, namespace B
    queue C: nominal 288, no jobs (it lends all of it)

B borrows first: four 144-chip jobs, the whole fleet. Then A wants two UltraServers: its
first job reclaims its nominal chips, its second takes a second UltraServer by fair sharing
(A's fair share and B's are 288 each), in both cases the chips of one whole UltraServer.
"""

from __future__ import annotations

from typing import Any

from tests.integration.operator_harness import GROUP, VERSION, Harness
from tests.integration.test_operator_queues import queue, status, submit, team_b

__all__ = ["team_b"]  # the fixture, used by name


def preempted_by(op: Harness, namespace: str, jobs: list[str]) -> dict[str, dict[str, Any]]:
    return {j: s for j in jobs
            if (s := status(op, namespace, j)).get("phase") in ("Preempted", "Pending")}


def preemption(job_status: dict[str, Any]) -> dict[str, Any]:
    """The job's Preempted condition (its message stays while it waits again)."""
    return dict(next(c for c in job_status["conditions"] if c["type"] == "Preempted"))


def test_the_queue_that_borrowed_first_gives_back_whole_ultraservers_to_fair_share(
        op: Harness, team_b: str) -> None:
    qa, qb, qc = f"{op.ns}-qa", f"{op.ns}-qb", f"{op.ns}-qc"
    queue(op, qa, nominal={"trn3-gen2": 144}, cohort=op.ns, namespaces=[op.ns],
          defaultFor=[op.ns])
    queue(op, qb, nominal={"trn3-gen2": 144}, cohort=op.ns, namespaces=[team_b])
    queue(op, qc, nominal={"trn3-gen2": 288}, cohort=op.ns)
    for i in range(4):
        op.ultraserver(f"{op.ns}-{i}")
    op.start("-n", team_b)

    bs = [f"b{i}" for i in range(4)]
    for b in bs:
        submit(op, team_b, b, 144, queueName=qb)
    op.wait("B holds the fleet", lambda: all(
        status(op, team_b, b).get("phase") == "Admitted" for b in bs), timeout=60)
    chips = {b: set(status(op, team_b, b)["allocation"]["chips"]) for b in bs}

    submit(op, op.ns, "a1", 144)  # within A's nominal quota: reclaim
    a1 = op.phase("a1", "Admitted", timeout=60)
    first = op.wait("one of B's jobs reclaimed", lambda: preempted_by(op, team_b, bs))
    assert len(first) == 1
    (r, reclaimed), = first.items()
    assert set(a1["status"]["allocation"]["chips"]) == chips[r]  # one whole UltraServer
    assert "reclaimed its nominal chips" in preemption(reclaimed)["message"]

    submit(op, op.ns, "a2", 144)  # beyond it: A holds 144 of its fair share of 288
    a2 = op.phase("a2", "Admitted", timeout=60)
    both = op.wait("a second of B's jobs preempted for fair sharing",
                   lambda: (lambda p: p if len(p) == 2 else None)(preempted_by(op, team_b, bs)))
    (f, fair), = ((k, v) for k, v in both.items() if k != r)
    assert set(a2["status"]["allocation"]["chips"]) == chips[f]  # one whole UltraServer
    condition = preemption(fair)
    assert condition["reason"] == "FairSharing"
    assert f"queue {qa}" in condition["message"] and f"queue {qb}" in condition["message"]

    def counted() -> dict[str, dict[str, Any]] | None:
        got = {q: op.api.get_cluster_custom_object(GROUP, VERSION, "tenantqueues", q)
               .get("status") or {} for q in (qa, qb)}
        return got if (got[qa].get("usedChips"), got[qb].get("usedChips")) == (288, 288) \
            else None

    shown = op.wait("each queue holds its fair share", counted)
    assert shown[qa]["fairShareChips"] == 288 and shown[qb]["fairShareChips"] == 288
    # B keeps its fair share: nothing more is taken from it
    assert len(preempted_by(op, team_b, bs)) == 2
