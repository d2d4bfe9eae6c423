"""The reference replays of every `ultraplane simulate` run (simulator/bounds.py).

Fleet: two Trn3 Gen2 UltraServers of 144 chips, one trace GPU = one chip.

    us0 [144 chips]   us1 [144 chips]
"""

from __future__ import annotations

import io

import pytest
from ultraplane.simulator.bounds import fluid_bound, greedy_in_domain
from ultraplane.simulator.traces import TraceJob, parse_rows


def trace(text: str) -> list[TraceJob]:
    jobs, bad = parse_rows(io.StringIO("job_id,submission_time,duration,num_gpu\n" + text))
    assert bad == []
    return jobs


def test_greedy_never_splits_but_fluid_pools_every_chip() -> None:
    # a: us0 [80 used | 64 free]   b: us1 [80 used | 64 free]   c: 100 chips fit neither
    jobs = trace("a,0,1000,80\nb,0,1000,80\nc,0,1000,100\n")
    greedy = greedy_in_domain(jobs, 1, [144, 144], 144)
    fluid = fluid_bound(jobs, 1, 288, 144)
    assert greedy.queue_delay_mean_s == pytest.approx(1000 / 3)  # c waits for a
    assert greedy.jct_mean_s == pytest.approx((1000 + 1000 + 2000) / 3)
    assert fluid.queue_delay_mean_s == 0.0  # 128 free chips anywhere are enough
    assert fluid.useful_utilization == pytest.approx(260_000 / (288 * 1000))


def test_greedy_large_job_takes_idle_ultraservers_and_starts_every_job_that_fits() -> None:
    # big (200 chips) needs one idle UltraServer + 56 chips on another; small (100) sits on us0
    # (44 free), so big
    # waits; tiny (4 chips) arrives after big and still starts at once (no reservation).
    jobs = trace("small,0,500,100\nbig,1,1000,200\ntiny,2,100,4\n")
    greedy = greedy_in_domain(jobs, 1, [144, 144], 144)
    assert greedy.large_jobs_queue_delay_mean_s == pytest.approx(499)
    assert greedy.jobs == 3


def test_jobs_larger_than_the_fleet_are_left_out() -> None:
    jobs = trace("huge,0,100,300\nok,0,100,4\n")
    assert greedy_in_domain(jobs, 1, [144, 144], 144).jobs == 1
    assert fluid_bound(jobs, 4, 288, 144).jobs == 1  # 4 chips per GPU: ok = 16 chips
