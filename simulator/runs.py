"""Run one replay per policy with a progress bar, then write the report.

Why its own module: the CLI and the benchmark both need "replay these jobs
under each policy"; the progress bar (rich, only on a terminal) belongs to
neither the replay loop nor the report writer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ultraplane.simulator.bounds import fluid_bound, greedy_in_domain
from ultraplane.simulator.fleets import FleetShape
from ultraplane.simulator.powerside import peak_provisioned
from ultraplane.simulator.records import ReplayResult
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import write_report
from ultraplane.simulator.traces import TraceJob

from ultraplane.scheduling.queueorder import QueueOrder


def replay_all(topology: Any, jobs: Sequence[TraceJob], configs: Sequence[ReplayConfig],
               *, progress: bool = False,
               held: Mapping[str, Sequence[str]] | None = None) -> list[ReplayResult]:
    """One `Replay` per config, sequentially (each owns its allocator)."""
    if not progress:
        return [Replay(topology, jobs, c, held=held).run() for c in configs]
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False) as bar:
        for c in configs:
            task = bar.add_task(f"replay {c.policy}", total=len(jobs))
            tick = lambda n, t=task: bar.advance(t, n)  # noqa: E731
            results.append(Replay(topology, jobs, c, progress=tick, held=held).run())
            bar.update(task, completed=len(jobs))
    return results


def run_policies(topology: Any, jobs: Sequence[TraceJob], configs: Sequence[ReplayConfig],
                 out: Path, *, fleet_name: str, traces: Sequence[str], bad_rows: Sequence[str],
                 progress: bool = False,
                 held: Mapping[str, Sequence[str]] | None = None,
                 services: Sequence[Any] | None = None) -> dict[str, Any]:
    """Replay every policy and write summary.json, jobs.csv, placements.jsonl, plots, report.
    With `services` (`servicefiles.ServiceSpec`s), the replays are one per scaling policy
    (`inferenceruns`), training placed by the first config's policy."""
    extra: dict[str, Any] | None = None
    if services:
        from ultraplane.simulator.inferenceruns import (
            inference_summary,
            replay_services,
            service_window,
        )

        results = replay_services(topology, jobs, services, configs[0], held=held)
        t0 = min((j.submit_s for j in jobs), default=0.0)
        extra = inference_summary(results, *service_window(t0, services))
    else:
        results = replay_all(topology, jobs, configs, progress=progress, held=held)
    # A fleet-wide power budget: the same run replays the provision-for-peak baseline (only the
    # UltraServers the budget holds at peak, the rest off; no budget needed).
    small = peak_provisioned(topology, configs[0].power_budgets) if configs else None
    if small is not None:
        names = {us.name for us in small.ultraservers}
        kept = {k: c for k, c in (held or {}).items()
                if all(chip.partition("/")[0] in names for chip in c)}
        base = dataclasses.replace(configs[0], power_budgets=(), idle_power_down_s=0.0)
        (baseline,) = replay_all(small, jobs, [base], held=kept)
        baseline.policy = "provision-for-peak"
        results.append(baseline)
    shape = FleetShape.of(topology)
    peak = sum(shape.hardware_of[n].peak_watts * shape.chips_of[n] for n in shape.names)
    cfg = configs[0]
    largest = max((shape.chips_of[n] for n in shape.names), default=0)
    idle_watts = {shape.hardware_of[n].idle_watts for n in shape.names}
    meta = {
        "fleet": fleet_name,
        "trace": ", ".join(traces),
        "chips_per_gpu": cfg.chips_per_gpu,
        "gpu_to_chip": f"one trace GPU = {cfg.chips_per_gpu} Trainium chip(s)",
        "seed": cfg.seed,
        "policies": [c.policy for c in configs],
        "jobs_in_trace": len(jobs),
        "ultraservers": len(shape.names),
        "failure_policy": cfg.failure_policy,
        "chip_failure_rate_per_hour": cfg.faults.chip_rate_per_hour,
        "server_failure_rate_per_hour": cfg.faults.server_rate_per_hour,
        "scripted_failures": [f"{t:g} s: {target}" for t, target in cfg.faults.scripted],
        "repair_s": cfg.faults.repair_s,
        "checkpoint_interval_s": cfg.checkpoint_interval_s,
        "reservation": cfg.reservation,
        "queue_order": ("arrival order (FIFO) inside a priority" if cfg.queue_stretch == 0 else
                        f"target start inside a priority: submit + {cfg.queue_stretch:g} x "
                        f"run time; gangs of {QueueOrder().large_from(largest)}+ chips (over "
                        "half the largest UltraServer) by submit time"),
        "idle_power_kw": shape.idle_watts() / 1e3,
        # one figure when every chip idles at the same power (the summary then says how much
        # of the idle draw was chips with no job); None for a fleet of mixed profiles
        "idle_watts_per_chip": min(idle_watts) if len(idle_watts) == 1 else None,
        "peak_power_kw_all_busy": peak / 1e3,
        "held_allocations": len(held or {}),
        "bad_rows": list(bad_rows),
    }
    if services:
        meta["policies"] = [r.policy for r in results]
        meta["placement_policy"] = cfg.policy
    sizes = [shape.chips_of[n] for n in shape.names]
    one = min(sizes, default=0)
    large = cfg.large_job_chips or one
    profiles = sorted({shape.hardware_of[n].name for n in shape.names if shape.chips_of[n] == one})
    meta["large_job_threshold"] = (
        f"large jobs: {large} chips or more" + (
            f" (one {', '.join(profiles)} UltraServer)" if large == one else ""))
    bounds = {
        "greedy": greedy_in_domain(jobs, cfg.chips_per_gpu, sizes, large),
        "fluid": fluid_bound(jobs, cfg.chips_per_gpu, sum(sizes), large),
    }
    return write_report(out, results, meta=meta, large_job_chips=large, extra=extra,
                        one_domain_chips=max(sizes, default=0), bounds=bounds)
