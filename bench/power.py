"""Benchmark: a fleet under a power budget, against provisioning for peak and no budget at all.

Replays each ITP cluster trace (one trace GPU = 4 Trainium chips) on a fleet of Trn3 Gen2
UltraServers sized so the offered load is high (`--load`, as bench/replay_quality.py), and
compares in the same run, at fleet-wide budgets of 60%, 70% and 80% of the fleet's peak draw:

- `ultraplane`: the whole fleet under the budget (admission within headroom, capping lowest
  priority first, UltraServers idle `--idle-power-down` seconds powered down);
- `provision-for-peak`: only as many UltraServers as the budget holds with every chip at peak;
  the rest are off (no budget needed: it can never exceed it);
- `unconstrained`: the whole fleet, no budget, no power-down (the replay without power).

Also `ultraplane` at 100% of peak (power-down on), against `unconstrained`.

A trace whose fleet is too small for provision-for-peak to keep even one UltraServer at a
budget is left out of the ratios against it. Figures per trace, then the geometric mean across
traces (`seconds_over_budget`: the largest
over every budget and trace; split jobs: the sum over every `ultraplane` run). Targets (issue
31): useful_work_vs_peak_provisioned_at_70 >= 1.25 (trace work completed per makespan hour),
jct_mean_vs_peak_provisioned_at_70 <= 0.8 (mean JCT over the jobs both runs completed: the
smaller fleet rejects gangs larger than itself, which would otherwise flatter its mean), seconds_over_budget = 0,
energy_per_useful_chip_hour_vs_unconstrained <= 0.8 (at 70%), jct_mean_vs_unconstrained_at_100
<= 1.02, split_jobs_that_fit_one_domain = 0. Every figure rests on the power assumptions in the
profile YAML (idle, standby, wake time, cap range and perf-vs-power curve; docs/simulator.md).
UltraServers power down after the profile's energy break-even (`ChipPower.break_even_s`: the
wake latency, since waking draws the idle power), a timeout chosen from the hardware figures,
not from the traces.

    python bench/power.py [--traces DIR] [--only cluster03,...] [--max-jobs N] [--quick]

`--quick`: two traces, their first 600 jobs, the 70% and 100% budgets only. The default run
replays each trace's first `--max-jobs` (2,000) jobs. Ends with ONE JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import summarize
from ultraplane.simulator.traces import TraceJob, load_trace

from ultraplane.hardware.powermodels import chip_power_of
from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.powerbudgets import BudgetSpec

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared/reference/traces/ms-itp-2021"
CHIPS_PER_GPU = 4
PROFILE = "trn3-gen2"
US_CHIPS = 144


def fleet_size(jobs: list[TraceJob], load: float) -> int:
    span = max(j.submit_s + j.duration_s for j in jobs) - min(j.submit_s for j in jobs)
    work = sum(j.gpus * CHIPS_PER_GPU * j.duration_s for j in jobs)
    biggest = max(j.gpus for j in jobs) * CHIPS_PER_GPU
    return int(max(math.ceil(biggest / US_CHIPS), round(work / span / (load * US_CHIPS)), 1))


def geomean(values: list[float]) -> float | None:
    good = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else None


def figures(jobs: list[TraceJob], n: int, cfg: ReplayConfig) -> dict[str, Any]:
    result = Replay(build_fleet(PROFILE, n), jobs, cfg).run()
    s = summarize(result, large_job_chips=US_CHIPS, one_domain_chips=US_CHIPS)
    done = [x for x in result.records if x.status == "completed"]
    s["jct_of"] = {x.job_id: x.jct_s for x in done if x.jct_s is not None}
    work_h = sum(x.chips * x.duration_s for x in done) / 3600.0
    s["useful_work_per_hour"] = work_h / (s["makespan_s"] / 3600.0)
    s["energy_per_useful_chip_hour"] = result.energy_kwh / work_h if work_h else math.inf
    s["over_s"] = result.power.seconds_over_budget if result.power is not None else 0.0
    return s


def common_jct_ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Mean JCT of `a` over `b`'s, over the jobs both completed: a smaller fleet that cannot
    run the largest jobs at all must not look faster for leaving them out."""
    both = a["jct_of"].keys() & b["jct_of"].keys()
    if not both:
        return None
    return sum(a["jct_of"][k] for k in both) / max(sum(b["jct_of"][k] for k in both), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path,
                    default=Path(os.environ.get("ULTRAPLANE_TRACES", DEFAULT_TRACES)))
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--only", default="", help="comma-separated trace stems")
    ap.add_argument("--max-jobs", type=int, default=2000, help="first N jobs of each trace")
    ap.add_argument("--idle-power-down", type=float, default=None, metavar="SECONDS",
                    help="default: the profile's energy break-even (ChipPower.break_even_s)")
    ap.add_argument("--quick", action="store_true", help="two traces, 600 jobs, 70%% and 100%%")
    args = ap.parse_args()
    files = sorted(args.traces.glob("*.csv"))
    if args.only:
        files = [f for f in files if f.stem in args.only.split(",")]
    shares = (0.6, 0.7, 0.8)
    max_jobs = args.max_jobs
    if args.quick:
        files, shares, max_jobs = files[:2], (0.7,), min(max_jobs, 600)
    if not files:
        raise SystemExit(f"no trace CSV files in {args.traces} (set --traces or ULTRAPLANE_TRACES)")
    peak_us = chip_power_of(PROFILE).peak * US_CHIPS
    if args.idle_power_down is None:
        args.idle_power_down = chip_power_of(PROFILE).break_even_s
    base = ReplayConfig(chips_per_gpu=CHIPS_PER_GPU)
    ratios: dict[str, list[float]] = {k: [] for k in (
        "useful_work_vs_peak_provisioned_at_70", "jct_mean_vs_peak_provisioned_at_70",
        "energy_per_useful_chip_hour_vs_unconstrained", "jct_mean_vs_unconstrained_at_100")}
    over, split = 0.0, 0
    print(f"{'trace':<10} {'jobs':>5} {'US':>3} {'run':<22} {'work/h':>8} {'JCT h':>7} "
          f"{'kWh/uch':>7} {'over s':>6} {'split':>5} {'s':>5}")
    for f in files:
        jobs, bad = load_trace(f)
        if bad:
            raise SystemExit(f"{f}: {len(bad)} bad rows, first: {bad[0]}")
        jobs.sort(key=lambda j: j.submit_s)
        jobs = jobs[:max_jobs]
        n = fleet_size(jobs, args.load)
        runs: dict[str, tuple[int, ReplayConfig]] = {"unconstrained": (n, base)}
        for share in (*shares, 1.0):
            budget = BudgetSpec("fleet", share * n * peak_us)
            runs[f"ultraplane@{share:.0%}"] = (n, dataclasses.replace(
                base, power_budgets=(budget,), idle_power_down_s=args.idle_power_down))
            if share < 1.0 and math.floor(share * n) >= 1:  # else not one UltraServer fits
                runs[f"provision-for-peak@{share:.0%}"] = (math.floor(share * n), base)
        s: dict[str, dict[str, Any]] = {}
        for name, (size, cfg) in runs.items():
            started = time.process_time()
            s[name] = got = figures(jobs, size, cfg)
            took = time.process_time() - started
            if name.startswith("ultraplane"):
                over = max(over, got["over_s"])
                split += got["split_jobs_that_fit_one_ultraserver"]
            print(f"{f.stem:<10} {len(jobs):>5} {size:>3} {name:<22} "
                  f"{got['useful_work_per_hour']:>8.0f} {got['jct_mean_s'] / 3600:>7.2f} "
                  f"{got['energy_per_useful_chip_hour']:>7.3f} {got['over_s']:>6.0f} "
                  f"{got['split_jobs_that_fit_one_ultraserver']:>5} {took:>5.1f}", flush=True)
        u70, free = s["ultraplane@70%"], s["unconstrained"]
        p70 = s.get("provision-for-peak@70%")
        if p70 is None:
            print(f"{f.stem:<10} provision-for-peak at 70% holds no UltraServer of {n}: left out "
                  "of the ratios against it")
        else:
            ratios["useful_work_vs_peak_provisioned_at_70"].append(
                u70["useful_work_per_hour"] / p70["useful_work_per_hour"])
            jct = common_jct_ratio(u70, p70)
            if jct is not None:
                ratios["jct_mean_vs_peak_provisioned_at_70"].append(jct)
        ratios["energy_per_useful_chip_hour_vs_unconstrained"].append(
            u70["energy_per_useful_chip_hour"] / free["energy_per_useful_chip_hour"])
        ratios["jct_mean_vs_unconstrained_at_100"].append(
            s["ultraplane@100%"]["jct_mean_s"] / free["jct_mean_s"])
    line: dict[str, Any] = {}
    for k, v in ratios.items():
        g = geomean(v)
        line[k] = None if g is None else round(g, 3)
    line["seconds_over_budget"] = round(over, 1)
    line["split_jobs_that_fit_one_domain"] = split
    keys = ("useful_work_vs_peak_provisioned_at_70", "jct_mean_vs_peak_provisioned_at_70",
            "seconds_over_budget", "energy_per_useful_chip_hour_vs_unconstrained",
            "jct_mean_vs_unconstrained_at_100", "split_jobs_that_fit_one_domain")
    print(json.dumps({k: line[k] for k in keys}))


if __name__ == "__main__":
    main()
