"""Moves in the trace replay: a job within its queue's unused quota starts at once by moving
a running job, which keeps running elsewhere and pays only its unsaved work and a restart.

    t=0     gen2-0000 [ a0 44 | b2 100 ]          gen2-0001 [ a1 56 | b1 44 | free 44 ]
    t=500   gen2-0000 [ free 44 | b2 100 ]        (a0 ends)
    A, B: nominal 144 each, one cohort. At t=1000, w (A, 88 chips) fits A's unused quota
    but no UltraServer, and nobody borrows: without moves it waits ten hours. Moving b1 into
    the 44 free chips of gen2-0000 frees 88 on gen2-0001.
"""

from __future__ import annotations

from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import summarize
from ultraplane.simulator.traces import TraceJob

from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.quotas import QueueSpec

GEN2 = "trn3-gen2"
LONG = 36_000.0


def replay(**cfg: object) -> tuple[dict[str, object], dict[str, tuple[float | None, int]]]:
    jobs = [TraceJob("b2", 0.0, LONG, 25, tenant="B"), TraceJob("a0", 0.0, 500.0, 11, tenant="A"),
            TraceJob("a1", 0.0, LONG, 14, tenant="A"), TraceJob("b1", 0.0, LONG, 11, tenant="B"),
            TraceJob("w", 1000.0, LONG, 22, tenant="A")]
    queues = tuple(QueueSpec(q, {GEN2: 144}, cohort="all") for q in ("A", "B"))
    result = Replay(build_fleet(GEN2, 2), jobs,
                    ReplayConfig(chips_per_gpu=4, queues=queues, **cfg)).run()  # type: ignore[arg-type]
    summary = summarize(result)
    return summary, {r.job_id: (r.start_s, r.moves) for r in result.records}


def test_a_guaranteed_job_starts_by_a_move_and_the_moved_job_keeps_running() -> None:
    summary, jobs = replay()
    assert jobs["w"] == (1000.0, 0)
    assert jobs["b1"] == (0.0, 1)  # moved once, never requeued
    assert summary["moves"] == 1 and summary["max_moves_per_job"] == 1
    # 400 s since its last checkpoint (1000 s at one every 600 s, less the 30 s write) plus
    # a 60 s restart, on 44 chips, over every chip-second used
    lost = summary["moved_chip_hours_lost"]
    assert isinstance(lost, float) and 0 < lost < 0.01
    assert summary["jobs_completed"] == 5


def test_without_moves_it_waits_for_a_job_to_end() -> None:
    summary, jobs = replay(moves=False)
    start, _ = jobs["w"]
    assert start is not None and start >= LONG and summary["moves"] == 0


def test_a_job_that_saves_on_notice_loses_less() -> None:
    periodic, _ = replay()
    notice, jobs = replay(checkpoint_on_notice=True)
    assert jobs["w"] == (1000.0, 0)
    assert notice["moved_chip_hours_lost"] < periodic["moved_chip_hours_lost"]  # type: ignore[operator]
