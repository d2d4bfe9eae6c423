"""Benchmark: replay every ITP trace file on a 10,000-chip fleet through the core allocator.

Fleet: 70 Trn3 Gen2 UltraServers = 10,080 chips (one trace GPU = one chip). The trace
files are merged into one workload (job ids prefixed by file). Baseline, in the same
run: the bare event engine pushing and popping the same number of events with no
allocator or scheduler, to show where the time goes. Targets (issue 5, one core):
>= 200,000 events/s and the whole replay <= 30 s.

Events = heap events (arrivals, ends, faults, occupancy samples) + admissions.

    python bench/simulator.py [--traces DIR] [--policy ultraplane|first-fit] [--ultraservers N]

The trace directory defaults to ../shared/reference/traces/ms-itp-2021 next to the repo,
or $ULTRAPLANE_TRACES. Ends with ONE JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from ultraplane.simulator.events import END, SUBMIT, Engine, Event
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.traces import TraceJob, load_trace

from ultraplane.hardware.topology import build_fleet

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared/reference/traces"


def load_all(directory: Path) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    files = sorted(directory.glob("*.csv"))
    if not files:
        raise SystemExit(f"no trace CSV files in {directory} (set --traces or ULTRAPLANE_TRACES)")
    for f in files:
        got, bad = load_trace(f, prefix=f"{f.stem}/")
        if bad:
            raise SystemExit(f"{f}: {len(bad)} bad rows, first: {bad[0]}")
        jobs.extend(got)
    jobs.sort(key=lambda j: j.submit_s)
    return jobs


def engine_baseline(jobs: list[TraceJob]) -> tuple[int, float]:
    """Submit and end events for every job through the bare heap, no allocator."""
    started = time.perf_counter()
    eng = Engine()
    for j in jobs:
        eng.schedule(j.submit_s, SUBMIT, Event("submit", j))
    for _, ev in eng.events():
        if ev.kind == "submit":
            eng.schedule(eng.now + ev.payload.duration_s, END, Event("end", ev.payload))
    wall = time.perf_counter() - started
    return eng.processed + len(jobs), wall  # + len(jobs): admissions, as the replay counts them


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path,
                    default=Path(os.environ.get("ULTRAPLANE_TRACES", DEFAULT_TRACES / "ms-itp-2021")))
    ap.add_argument("--policy", default="ultraplane", choices=["ultraplane", "first-fit"])
    ap.add_argument("--ultraservers", type=int, default=70)
    args = ap.parse_args()
    d = args.traces if args.traces.name == "ms-itp-2021" or list(args.traces.glob("*.csv")) \
        else args.traces / "ms-itp-2021"
    t0 = time.perf_counter()
    jobs = load_all(d)
    parse_s = time.perf_counter() - t0
    topology = build_fleet("trn3-gen2", args.ultraservers)
    base_events, base_wall = engine_baseline(jobs)
    started = time.perf_counter()
    result = Replay(topology, jobs, ReplayConfig(policy=args.policy)).run()
    replay_s = time.perf_counter() - started
    wall = parse_s + replay_s
    eps = result.events / replay_s
    done = sum(r.status == "completed" for r in result.records)
    print(f"fleet: {args.ultraservers} x trn3-gen2 = {topology.chip_count:,} chips; policy {args.policy}")
    print(f"trace: {len(jobs):,} jobs from {d} (parsed in {parse_s:.2f} s); {done:,} completed")
    print(f"replay: {result.events:,} events in {replay_s:.2f} s = {eps:,.0f} events/s")
    print(f"baseline (bare engine, no allocator): {base_events:,} events in {base_wall:.2f} s = "
          f"{base_events / base_wall:,.0f} events/s; replay is {base_wall / replay_s:.3f}x of it")
    print(f"targets: events/s >= 200,000: {'met' if eps >= 200_000 else 'MISSED'} "
          f"({eps / 200_000:.2f}x); whole replay <= 30 s: {'met' if wall <= 30 else 'MISSED'} ({wall:.1f} s)")
    print(json.dumps({"jobs": len(jobs), "events": result.events, "events_per_s": round(eps),
                      "wall_s": round(wall, 2)}))


if __name__ == "__main__":
    main()
