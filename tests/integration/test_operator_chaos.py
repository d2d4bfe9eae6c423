"""Chaos: kill -9 the operator again and again during a churn of 1,000 jobs, then check that
nothing was lost and no chip was ever in two persisted allocations."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.operator_harness import Harness

JOBS = int(os.environ.get("ULTRAPLANE_CHAOS_JOBS", "1000"))
SEED = 4
HOLDING = ("Admitted", "Running")
ALLOWED = {"Pending", "Admitted", "Preempted", "Running", "Succeeded", "Failed", ""}

pytestmark = pytest.mark.slow


def double_allocated(jobs: list[dict[str, Any]]) -> list[str]:
    owners: Counter[str] = Counter()
    for job in jobs:
        status = job.get("status") or {}
        if status.get("phase") in HOLDING:
            owners.update((status.get("allocation") or {}).get("chips") or [])
    return [chip for chip, n in owners.items() if n > 1]


def test_kill9_during_churn_loses_nothing(op: Harness) -> None:
    rng = random.Random(SEED)
    fleet = [f"{op.ns}-{i}" for i in range(4)]  # 4 x 144 = 576 chips
    for name in fleet:
        op.ultraserver(name)
    op.start()
    stop = threading.Event()
    violations: list[str] = []
    finishing = threading.Event()
    finishing.set()

    def finisher() -> None:
        # Plays the simulator: finishes a random share of the jobs holding chips.
        while not stop.is_set():
            jobs = op.jobs()
            if dup := double_allocated(jobs):
                violations.append(f"chips in two allocations: {dup[:5]}")
            if finishing.is_set():
                for job in jobs:
                    status = job.get("status") or {}
                    if status.get("phase") in HOLDING and rng.random() < 0.5:
                        # guarded, as the simulator writes: never over an eviction since read
                        op.set_status(job["metadata"]["name"], {"phase": "Succeeded"},
                                      job["metadata"]["resourceVersion"])
            time.sleep(0.3)

    def killer() -> None:
        while not stop.is_set():
            time.sleep(rng.uniform(1.5, 4.0))
            if stop.is_set():
                break
            op.kill9()
            op.start()

    threads = [threading.Thread(target=finisher), threading.Thread(target=killer)]
    for t in threads:
        t.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            sizes = [rng.choice([1, 2, 4, 8, 16, 36]) for _ in range(JOBS)]
            prios = [rng.choice([0, 0, 1, 2]) for _ in range(JOBS)]
            list(pool.map(lambda i: op.job(f"j{i:04d}", sizes[i], prios[i]), range(JOBS)))
        time.sleep(5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not violations, violations

    # Quiet period: one last restart, no finishing; the persisted state must be consistent.
    op.kill9()
    op.start()

    def settled() -> list[dict[str, Any]] | None:
        jobs = op.jobs()
        phases = Counter((j.get("status") or {}).get("phase", "") for j in jobs)
        waiting = phases["Pending"] + phases["Preempted"] + phases[""]
        free = sum((op.get_ultraserver(n).get("status") or {}).get("free", {}).get("chips", 0)
                   for n in fleet)
        smallest_waiting = min(
            (j["spec"]["chips"] for j in jobs
             if (j.get("status") or {}).get("phase", "") in ("Pending", "Preempted", "")),
            default=0)
        return jobs if (waiting == 0 or smallest_waiting > free) and all(
            (j.get("status") or {}).get("phase") for j in jobs) else None

    op.wait("the queue to settle", settled, timeout=120)

    def us_agrees() -> list[dict[str, Any]] | None:
        # UltraServer status is a view written at most once per interval: wait for it to agree
        # with the job statuses (read after it, so a job admitted meanwhile shows in both)
        us = {n: (op.get_ultraserver(n).get("status") or {}) for n in fleet}
        jobs = op.jobs()
        held: Counter[str] = Counter()
        for job in jobs:
            status = job.get("status") or {}
            if status.get("phase") in HOLDING:
                held.update(c.split("/")[0] for c in (status.get("allocation") or {}).get(
                    "chips", []))
        ok = all((us[n].get("allocated") or {}).get("chips") == held[n] for n in fleet)
        return jobs if ok else None

    jobs = op.wait("UltraServer status to agree with the jobs", us_agrees, timeout=60)
    assert len(jobs) == JOBS
    assert not double_allocated(jobs)
    assert {(j.get("status") or {}).get("phase", "") for j in jobs} <= ALLOWED
    per_us: Counter[str] = Counter()
    for job in jobs:
        status = job["status"]
        if status["phase"] in HOLDING:
            assert len(status["allocation"]["chips"]) == job["spec"]["chips"]
            per_us.update(c.split("/")[0] for c in status["allocation"]["chips"])
        elif status["phase"] in ("Pending", "Preempted"):
            assert not status.get("allocation")
    for name in fleet:
        us = op.get_ultraserver(name)["status"]
        assert us["allocated"]["chips"] == per_us[name], name
        assert us["allocated"]["chips"] + us["free"]["chips"] == 144

    # Finish everything: every job ends Succeeded and every chip comes back.
    def all_done() -> bool | Exception:
        phases: Counter[str] = Counter()
        for job in op.jobs():
            status = job.get("status") or {}
            if status.get("phase") in HOLDING:
                op.set_status(job["metadata"]["name"], {"phase": "Succeeded"},
                              job["metadata"]["resourceVersion"])
            phases[f"{status.get('phase')}/{status.get('reason')}"] += 1
        # the operator's finish write sets reason Succeeded (and drops the allocation); a job it
        # has not rewritten yet still says Admitted
        done = {"Succeeded/None", "Succeeded/Admitted", "Succeeded/Succeeded"}
        return True if set(phases) <= done else ValueError(
            dict(phases))

    # 1,000 jobs through 576 chips: minutes on a loaded 2-core machine, so a generous bound
    op.wait("every job to finish", all_done, timeout=480)
    op.wait("chips released", lambda: all(
        op.get_ultraserver(n)["status"]["allocated"]["chips"] == 0 for n in fleet), timeout=30)
