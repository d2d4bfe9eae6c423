"""Replay outputs: summary.json, jobs.csv, placements.jsonl, PNG plots and report.html.

Why these files: summary.json is what a study compares (one block per policy,
the keys are a contract of issue 5), jobs.csv and placements.jsonl let a user
re-derive any figure, and the plots plus report.html are what one shows a
person. Plotting uses matplotlib's Agg backend, imported only here, so the
replay itself stays importable without a display.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from ultraplane.simulator.bounds import BoundResult
from ultraplane.simulator.records import ReplayResult


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def summarize(r: ReplayResult, *, large_job_chips: int = 144, one_domain_chips: int = 144,
              bounds: Mapping[str, BoundResult] | None = None,
              idle_power_w: float | None = None,
              idle_watts_per_chip: float | None = None) -> dict[str, Any]:
    """The per-policy figures of summary.json (issue 5's keys first, then context).

    `utilization` is *useful* utilization: the trace's chip-seconds of the jobs that completed
    over the fleet's chip-seconds in the makespan. `allocated_utilization` counts every
    chip-second chips were held, including the slowdown of split jobs, checkpoints and lost
    work, so a policy that wastes more does not look better. `bounds` are the reference
    replays of the same trace (`simulator.bounds`); the `*_vs_*` keys are ratios to them.

    `idle_power_w` (the fleet's draw with every chip idle) splits `energy_kwh` exactly, since
    the power model is idle + dynamic per chip (`models.Hardware.chip_power`):
    `energy_idle_kwh` is the idle floor of every chip over the makespan, `energy_busy_kwh` the
    extra drawn by chips running jobs. With `idle_watts_per_chip` (a fleet of one idle
    power), `energy_idle_unallocated_kwh` is the part of the idle floor spent by chips that
    held no job (busy chip-seconds are exact, from the ledger). Every time is simulated (`simulated: true`): seconds on
    the trace's own clock (its submission times), never wall-clock time."""
    done = [x for x in r.records if x.status == "completed"]
    jct = [x.jct_s for x in done if x.jct_s is not None]
    delays = [x.queue_delay_s for x in r.records if x.queue_delay_s is not None]
    large = [x.queue_delay_s for x in r.records
             if x.queue_delay_s is not None and x.chips >= large_job_chips]
    span = max(r.t_end - r.t0, 1e-9)
    energy = r.energy_kwh
    capacity = r.total_chips * span
    useful = sum(x.chips * x.duration_s for x in done) / capacity if r.total_chips else 0.0
    allocated = r.busy_chip_s / capacity if r.total_chips else 0.0
    unallocated_kwh = (None if idle_watts_per_chip is None or not r.total_chips else
                       idle_watts_per_chip * max(capacity - r.busy_chip_s, 0.0) / 3.6e6)
    fits = [x for x in r.records if x.chips <= one_domain_chips and x.max_ultraservers]
    split = [x for x in fits if x.max_ultraservers > 1]
    stretch = [x.stretch for x in split if x.stretch is not None]
    out: dict[str, Any] = {
        "jobs_submitted": len(r.records),
        "jobs_completed": len(done),
        "jct_mean_s": _mean(jct),
        "jct_p50_s": _pct(jct, 50),
        "jct_p99_s": _pct(jct, 99),
        "queue_delay_mean_s": _mean(delays),
        "queue_delay_p99_s": _pct(delays, 99),
        "utilization": useful,
        "useful_utilization": useful,
        "allocated_utilization": allocated,
        "energy_kwh": energy,
        "avg_power_kw": energy * 3600.0 / span,
        "peak_power_kw": r.peak_power_w / 1e3,
        "large_jobs_queue_delay_mean_s": _mean(large),
        "large_jobs_queue_delay_p99_s": _pct(large, 99),
        "large_jobs_queue_delay_max_s": max(large, default=0.0),
        "large_job_chips": large_job_chips,
        "large_jobs": len(large),
        "jobs_that_fit_one_ultraserver": len(fits),
        "split_jobs_that_fit_one_ultraserver": len(split),
        "split_jobs_stretch_p50": _pct(stretch, 50) if stretch else None,
        "jobs_rejected": sum(x.status == "rejected" for x in r.records),
        "jobs_failed": sum(x.status == "failed" for x in r.records),
        "jobs_unfinished": sum(x.status == "unfinished" for x in r.records),
        "rejected": [{"job_id": x.job_id, "chips": x.chips, "reason": x.reason}
                     for x in r.records if x.status == "rejected"][:100],
        "fleet_chips": r.total_chips,
        "makespan_s": span,
        "events": r.events,
        "simulated": True,
        # (a run's own fleet when it says: a provision-for-peak baseline is a smaller one)
        **_energy_split(energy, span,
                        r.idle_power_w if r.idle_power_w is not None else idle_power_w),
        # the part of the idle draw spent by chips that held no job (uniform fleets only)
        "energy_idle_unallocated_kwh": unallocated_kwh,
    }
    for short, bound in (bounds or {}).items():
        out[f"jct_mean_vs_{short}"] = _ratio(out["jct_mean_s"], bound.jct_mean_s)
        out[f"large_wait_vs_{short}"] = _ratio(out["large_jobs_queue_delay_mean_s"],
                                               bound.large_jobs_queue_delay_mean_s)
        out[f"useful_util_vs_{short}"] = _ratio(useful, bound.useful_utilization)
    if bounds:
        out["bounds"] = {short: b.as_dict() for short, b in bounds.items()}
    if r.power is not None:  # power budgets or power-down: the power keys
        from ultraplane.simulator.powerreports import power_summary

        out.update(power_summary(r, sum(x.chips * x.duration_s for x in done)))
    if r.tenants is not None:  # tenant queues: per-tenant and fleet-wide fairness figures
        from ultraplane.simulator.tenants import tenant_summary

        out.update(tenant_summary(r))
        # moves serve tenant queues only: running jobs moved to make room for a guaranteed
        # job, the work and restarts they lost over the chip-time used, the most of one job
        out["moves"] = r.moves
        out["moved_chip_hours_lost"] = r.moved_lost_chip_s / r.busy_chip_s if r.busy_chip_s else 0.0
        out["max_moves_per_job"] = max((x.moves for x in r.records), default=0)
    return out


def _energy_split(energy_kwh: float, span_s: float, idle_power_w: float | None
                  ) -> dict[str, float | None]:
    if idle_power_w is None or energy_kwh <= 0:
        return {"energy_idle_kwh": None, "energy_busy_kwh": None, "energy_idle_share": None}
    # the idle floor never exceeds the integral it is part of (float rounding aside)
    idle = min(idle_power_w * span_s / 3.6e6, energy_kwh)
    return {"energy_idle_kwh": idle, "energy_busy_kwh": energy_kwh - idle,
            "energy_idle_share": idle / energy_kwh}


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity (nested) turned into None: summary.json stays JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_tables(out: Path, results: Sequence[ReplayResult]) -> None:
    """jobs.csv and placements.jsonl for every policy."""
    with (out / "jobs.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "policy", "submit_s", "start_s", "end_s", "chips", "ultraservers",
                    "energy_kwh", "tenant", "moves"])
        for r in results:
            for x in r.records:
                w.writerow([x.job_id, r.policy, _num(x.submit_s), _num(x.start_s), _num(x.end_s),
                            x.chips, x.ultraservers, f"{x.energy_kwh:.6f}", x.tenant, x.moves])
    with (out / "placements.jsonl").open("w") as fh:
        for r in results:
            for job_id, t, event, chips in r.placements:
                fh.write(json.dumps({"policy": r.policy, "job_id": job_id, "t_s": t,
                                     "event": event, "chips": list(chips)}) + "\n")


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}".rstrip("0").rstrip(".")


def write_report(out: Path, results: Sequence[ReplayResult], *, meta: dict[str, Any],
                 large_job_chips: int = 144, one_domain_chips: int = 144,
                 bounds: Mapping[str, BoundResult] | None = None,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write every output file; returns the summary dict (the policies' blocks). `extra`
    are top-level keys summary.json gains beside them (inference services' figures)."""
    out.mkdir(parents=True, exist_ok=True)
    idle_kw = meta.get("idle_power_kw")
    idle_w = None if idle_kw is None else float(idle_kw) * 1e3
    summary = {r.policy: finite({**summarize(r, large_job_chips=large_job_chips,
                                             one_domain_chips=one_domain_chips, bounds=bounds,
                                             idle_power_w=idle_w,
                                             idle_watts_per_chip=meta.get("idle_watts_per_chip")),
                       **meta})
               for r in results}
    whole = {**summary, **finite(dict(extra))} if extra else summary
    (out / "summary.json").write_text(json.dumps(whole, indent=2, allow_nan=False) + "\n")
    write_tables(out, results)
    from ultraplane.simulator.powerreports import write_power_csv

    for r in results:  # one power.csv (the first policy run under budgets)
        if r.power is not None:
            write_power_csv(out / "power.csv", r)
            break
    # matplotlib and Jinja2 only when writing a report
    from ultraplane.simulator import plots, reportpages

    figures = plots.write_plots(out, results, meta)
    if any(r.services for r in results):
        from ultraplane.simulator.inferenceplots import service_plots

        figures += service_plots(out, results)
    from ultraplane.simulator.movereports import move_rows

    reportpages.write_html(out, summary, figures, moves=move_rows(results))
    return summary
