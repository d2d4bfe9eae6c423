"""Benchmark: placement quality on real traces, against bounds measured in the same run.

Replays each ITP cluster trace (one file = one cluster; one trace GPU = 4 Trainium chips) on
a fleet of Trn3 Gen2 UltraServers sized so the offered load is high (`--load`, default 0.85
of the fleet's chip-seconds over the trace's span, and at least enough UltraServers for the
largest job), through:

- the `ultraplane` policy, with the simulator's overheads on (checkpoints every 600 s at
  30 s each, restarts) and the backfill reservation;
- the in-domain greedy baseline (simulator/bounds.py): first fit inside one UltraServer,
  arrival order, no overheads, no reservation;
- the fluid bound: chips fungible, no topology, no overheads.

Large jobs: 144 chips or more (one Gen2 UltraServer). Ratios per trace are the policy's
figure over the baseline's; the JSON line holds their geometric means across traces (a trace
with no large job has no large-wait ratio and is left out of that mean).
Targets (issue 11): jct_mean_vs_greedy <= 1.0, large_wait_vs_greedy <= 0.7,
useful_util_vs_greedy >= 1.0, split_jobs_that_fit_one_domain = 0.

A diagnostic replays the `ultraplane` policy once more with its overheads off (no checkpoint or
restart cost; faults are off in both): `useful_util_vs_greedy_no_overheads` (and the table's
`noOH` column) separates what placement and queue order lose from what the overheads cost.

    python bench/replay_quality.py [--traces DIR] [--load 0.85] [--only cluster03,...]

Ends with ONE JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path

from ultraplane.simulator.bounds import fluid_bound, greedy_in_domain
from ultraplane.simulator.models import DEFAULT_ASSUMPTIONS
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import summarize
from ultraplane.simulator.traces import TraceJob, load_trace

from ultraplane.hardware.topology import build_fleet
from ultraplane.scheduling.queueorder import DEFAULT_STRETCH

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared/reference/traces/ms-itp-2021"
CHIPS_PER_GPU = 4
US_CHIPS = 144  # one Trn3 Gen2 UltraServer


def fleet_size(jobs: list[TraceJob], load: float) -> int:
    span = max(j.submit_s + j.duration_s for j in jobs) - min(j.submit_s for j in jobs)
    work = sum(j.gpus * CHIPS_PER_GPU * j.duration_s for j in jobs)
    biggest = max(j.gpus for j in jobs) * CHIPS_PER_GPU
    return max(math.ceil(biggest / US_CHIPS), round(work / span / (load * US_CHIPS)), 1)


def geomean(values: list[float]) -> float | None:
    good = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path,
                    default=Path(os.environ.get("ULTRAPLANE_TRACES", DEFAULT_TRACES)))
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--only", default="", help="comma-separated trace stems")
    ap.add_argument("--no-reservation", action="store_true")
    ap.add_argument("--queue-stretch", type=float, default=DEFAULT_STRETCH,
                    help="rank = submit + stretch x run time inside a priority; 0: FIFO")
    args = ap.parse_args()
    files = sorted(args.traces.glob("*.csv"))
    if args.only:
        files = [f for f in files if f.stem in args.only.split(",")]
    if not files:
        raise SystemExit(f"no trace CSV files in {args.traces} (set --traces or ULTRAPLANE_TRACES)")
    ratios: dict[str, list[float]] = {k: [] for k in (
        "jct_mean_vs_greedy", "large_wait_vs_greedy", "useful_util_vs_greedy",
        "jct_mean_vs_fluid", "useful_util_vs_greedy_no_overheads")}
    split = 0
    print(f"{'trace':<10} {'jobs':>6} {'US':>3} {'JCT/greedy':>10} {'largewait/greedy':>16} "
          f"{'useful/greedy':>13} {'JCT/fluid':>9} {'split':>5} {'useful':>7} {'alloc':>6} "
          f"{'noOH':>5} {'s':>6}")
    for f in files:
        jobs, bad = load_trace(f)
        if bad:
            raise SystemExit(f"{f}: {len(bad)} bad rows, first: {bad[0]}")
        jobs.sort(key=lambda j: j.submit_s)
        n = fleet_size(jobs, args.load)
        topo = build_fleet("trn3-gen2", n)
        started = time.process_time()
        cfg = ReplayConfig(chips_per_gpu=CHIPS_PER_GPU, reservation=not args.no_reservation,
                           queue_stretch=args.queue_stretch)
        result = Replay(topo, jobs, cfg).run()
        took = time.process_time() - started
        bounds = {"greedy": greedy_in_domain(jobs, CHIPS_PER_GPU, [US_CHIPS] * n, US_CHIPS),
                  "fluid": fluid_bound(jobs, CHIPS_PER_GPU, US_CHIPS * n, US_CHIPS)}
        s = summarize(result, large_job_chips=US_CHIPS, one_domain_chips=US_CHIPS, bounds=bounds)
        free = dataclasses.replace(DEFAULT_ASSUMPTIONS, checkpoint_cost_s=0.0, restart_cost_s=0.0)
        bare = summarize(Replay(topo, jobs, dataclasses.replace(cfg, assumptions=free)).run(),
                         large_job_chips=US_CHIPS, one_domain_chips=US_CHIPS, bounds=bounds)
        s["useful_util_vs_greedy_no_overheads"] = bare["useful_util_vs_greedy"]
        for k, v in ratios.items():
            if s[k] is not None:
                v.append(s[k])
        split += s["split_jobs_that_fit_one_ultraserver"]

        def show(key: str, width: int, s: dict[str, object] = s) -> str:
            v = s[key]
            return f"{v:>{width}.2f}" if isinstance(v, float) else f"{'n/a':>{width}}"

        print(f"{f.stem:<10} {len(jobs):>6} {n:>3} {show('jct_mean_vs_greedy', 10)} "
              f"{show('large_wait_vs_greedy', 16)} {show('useful_util_vs_greedy', 13)} "
              f"{show('jct_mean_vs_fluid', 9)} {s['split_jobs_that_fit_one_ultraserver']:>5} "
              f"{s['useful_utilization']:>7.1%} {s['allocated_utilization']:>6.1%} "
              f"{show('useful_util_vs_greedy_no_overheads', 5)} {took:>6.1f}",
              flush=True)
    line: dict[str, object] = {"traces": len(files)}
    for k, v in ratios.items():
        g = geomean(v)
        line[k] = None if g is None else round(g, 3)
    line["split_jobs_that_fit_one_domain"] = split
    line = {k: line[k] for k in ("traces", "jct_mean_vs_greedy", "large_wait_vs_greedy",
                                 "useful_util_vs_greedy", "split_jobs_that_fit_one_domain",
                                 "jct_mean_vs_fluid", "useful_util_vs_greedy_no_overheads")}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
