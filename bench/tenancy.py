"""Benchmark: teams sharing one fleet, against a shared FIFO and separate clusters in one run.

Replays a multi-tenant trace (the `tenant` column names each job's team; one trace GPU = 4
Trainium chips) on a fleet of Trn3 Gen2 UltraServers sized so the offered load is high
(`--load`, default 0.85 of the fleet's chip-seconds over the trace's span, and at least enough
UltraServers for the largest job). Each team's nominal quota is proportional to its chip-hours
in the trace (largest remainder, so the quotas add up to the fleet), weight 1, one cohort.
(`--weights nominal`: each team's weight in proportion to its nominal quota instead, so a
team's fair share of a contended fleet is its quota; with weight 1 a team whose quota is
larger than an equal share counts as above its fair share while it uses only its quota, which
no preemption takes.) Three policies:

- `shared`: one queue, no quotas (how the fleet behaves without tenant queues);
- `partitioned`: each team only its nominal chips, no borrowing (separate clusters);
- `ultraplane`: cohort borrowing, weighted fair share and reclaim (`ultraplane.policies.quotas`).

The `ultraplane` figures (simulator/tenants.py defines them) and its ratios to the other two:
targets (issue 30) useful_util_vs_shared >= 0.97, jct_mean_vs_partitioned <= 0.6,
guarantee_p99_s <= 900, reclaim_lost_fraction <= 0.02, split_jobs_that_fit_one_domain = 0;
and (issue 37) fair_share_maxmin_jain >= 0.85 (held chips against each team's weighted
max-min fair share, while the teams together want more than the fleet),
fairness_preempted_fraction + reclaim_lost_fraction <= 0.02, and no team's mean JCT worse
than on its own partition (`teams_worse_than_partitioned` names those that are, with a table
of every team's). `borrowed_chip_time_jain` is issue 30's `fair_share_jain`, renamed for what
it measures. `ultraplane` moves running jobs to make room for guaranteed ones
(`ultraplane.scheduling.moves`); `no-moves` is the same policy without them, for
`guarantee_p99_s_no_moves` (issue 38: guarantee_p99_s <= 900, moved_chip_hours_lost +
reclaim_lost_fraction <= 0.02, max_moves_per_job <= 3). `packing` and `packing-no-moves` are
`ultraplane` and `no-moves` with each queue's guaranteed jobs packed onto the UltraServers it
already uses (`ultraplane.placement.packings`), for the `*_packing*` figures.

    python bench/tenancy.py [--trace FILE] [--load 0.85]

Ends with ONE JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import summarize
from ultraplane.simulator.traces import TraceJob, load_trace

from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.quotas import QueueSpec

DEFAULT_TRACE = (Path(__file__).resolve().parents[1].parent
                 / "shared/reference/traces/tenants/itp-7-orgs-d30-d44.csv")
CHIPS_PER_GPU = 4
US_CHIPS = 144  # one Trn3 Gen2 UltraServer
PROFILE = "trn3-gen2"


def fleet_size(jobs: list[TraceJob], load: float) -> int:
    span = max(j.submit_s + j.duration_s for j in jobs) - min(j.submit_s for j in jobs)
    work = sum(j.gpus * CHIPS_PER_GPU * j.duration_s for j in jobs)
    biggest = max(j.gpus for j in jobs) * CHIPS_PER_GPU
    return int(max(math.ceil(biggest / US_CHIPS), round(work / span / (load * US_CHIPS)), 1))


def proportional_quotas(jobs: list[TraceJob], chips: int) -> dict[str, int]:
    """Nominal chips per tenant, proportional to its chip-hours (largest remainder)."""
    hours: dict[str, float] = {}
    for j in jobs:
        hours[j.tenant or ""] = hours.get(j.tenant or "", 0.0) + j.gpus * CHIPS_PER_GPU * j.duration_s
    total = sum(hours.values())
    exact = {t: chips * h / total for t, h in hours.items()}
    out = {t: int(v) for t, v in exact.items()}
    for t in sorted(exact, key=lambda t: out[t] - exact[t])[:chips - sum(out.values())]:
        out[t] += 1
    return out


def mean_jct_by_team(records: list[Any]) -> dict[str, float]:
    """Each team's mean JCT (seconds) over its finished jobs."""
    done: dict[str, list[float]] = {}
    for r in records:
        if r.jct_s is not None:
            done.setdefault(r.tenant, []).append(r.jct_s)
    return {t: sum(v) / len(v) for t, v in sorted(done.items())}


def teams_worse(mine: dict[str, float], alone: dict[str, float]) -> list[str]:
    """The teams whose mean JCT sharing the fleet is worse than on their own partition (the
    sharing incentive), by more than 1% (noise of a replay's tie-breaks)."""
    return [t for t, v in sorted(mine.items()) if t in alone and v > alone[t] * 1.01]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--ultraservers", type=int, default=0, help="fleet size (0: from --load)")
    ap.add_argument("--weights", choices=("one", "nominal"), default="one",
                    help="each team's fair-share weight: 1, or in proportion to its nominal "
                    "quota (then its fair share of a contended fleet is its nominal quota)")
    args = ap.parse_args()
    jobs, bad = load_trace(args.trace)
    if bad:
        raise SystemExit(f"{args.trace}: {len(bad)} bad rows, first: {bad[0]}")
    if any(j.tenant is None for j in jobs):
        raise SystemExit(f"{args.trace}: every row needs a tenant")
    jobs.sort(key=lambda j: j.submit_s)
    n = args.ultraservers or fleet_size(jobs, args.load)
    topo = build_fleet(PROFILE, n)
    nominal = proportional_quotas(jobs, n * US_CHIPS)
    mean = sum(nominal.values()) / len(nominal)
    cohort = tuple(QueueSpec(t, {PROFILE: c}, cohort="org",
                             weight=1.0 if args.weights == "one" else max(c, 1) / mean)
                   for t, c in sorted(nominal.items()))
    alone = tuple(dataclasses.replace(s, cohort=None) for s in cohort)
    base = ReplayConfig(chips_per_gpu=CHIPS_PER_GPU)
    policies = {
        "shared": dataclasses.replace(base, queues=cohort, enforce_quotas=False),
        # (no moves: a separate cluster cannot move another team's jobs)
        "partitioned": dataclasses.replace(base, queues=alone, moves=False),
        "ultraplane": dataclasses.replace(base, queues=cohort),
        # the same without moves (ultraplane.scheduling.moves), for guarantee_p99_s_no_moves
        "no-moves": dataclasses.replace(base, queues=cohort, moves=False),
        # a queue's guaranteed jobs packed onto its UltraServers (ultraplane.placement.packings),
        # with moves and without, to tell what packing does on its own
        "packing": dataclasses.replace(base, queues=cohort, queue_packing=True),
        "packing-no-moves": dataclasses.replace(base, queues=cohort, queue_packing=True,
                                                moves=False),
    }
    print(f"{args.trace.name}: {len(jobs)} jobs, {len(nominal)} tenants, {n} UltraServers; "
          f"nominal {dict(sorted(nominal.items()))}")
    print(f"{'policy':<12} {'useful':>7} {'JCT mean h':>10} {'wait mean h':>11} "
          f"{'guar p99 s':>11} {'fair':>5} {'short':>6} {'lost':>6} {'split':>5} {'s':>6}")
    s: dict[str, dict[str, float]] = {}
    held_vs_fair: dict[str, dict[str, float]] = {}
    team_jct: dict[str, dict[str, float]] = {}
    for name, cfg in policies.items():
        started = time.process_time()
        result = Replay(topo, jobs, cfg).run()
        took = time.process_time() - started
        summary = summarize(result, large_job_chips=US_CHIPS, one_domain_chips=US_CHIPS)
        assert result.tenants is not None
        summary.update(result.tenants.fleet())
        f = result.tenants
        held_vs_fair[name] = {t: round(f.held_contended_cs[t] / f.fair_cs[t], 2)
                              for t in sorted(f.fair_cs) if f.fair_cs[t]}
        s[name] = summary
        team_jct[name] = mean_jct_by_team(result.records)
        print(f"{name:<12} {summary['useful_utilization']:>7.1%} "
              f"{summary['jct_mean_s'] / 3600:>10.2f} {summary['queue_delay_mean_s'] / 3600:>11.2f} "
              f"{summary['guarantee_p99_s']:>11.0f} {summary['fair_share_maxmin_jain']:>5.2f} "
              f"{summary['fair_share_shortfall']:>6.3f} "
              f"{summary['reclaim_lost_fraction']:>6.3f} "
              f"{summary['split_jobs_that_fit_one_ultraserver']:>5} {took:>6.1f}", flush=True)
    for name, ratios in held_vs_fair.items():
        print(f"{name}: chips held / fair share while contended, per tenant: {ratios}")
    worse = teams_worse(team_jct["ultraplane"], team_jct["partitioned"])
    print(f"{'team':<12} {'JCT h ultraplane':>16} {'JCT h partitioned':>17} {'ratio':>6}")
    for team in sorted(team_jct["ultraplane"]):
        mine, alone = team_jct["ultraplane"][team], team_jct["partitioned"].get(team)
        print(f"{team:<12} {mine / 3600:>16.2f} "
              f"{'n/a' if alone is None else f'{alone / 3600:.2f}':>17} "
              f"{'n/a' if not alone else f'{mine / alone:.2f}':>6}")
    print("teams doing worse than on their own partition: "
          + (", ".join(worse) if worse else "none"))
    u = s["ultraplane"]
    line = {
        "useful_util_vs_shared": round(u["useful_utilization"] / s["shared"]["useful_utilization"], 3),
        "jct_mean_vs_partitioned": round(u["jct_mean_s"] / s["partitioned"]["jct_mean_s"], 3),
        "guarantee_p99_s": round(u["guarantee_p99_s"], 1),
        "guarantee_p99_s_no_moves": round(s["no-moves"]["guarantee_p99_s"], 1),
        "moves": int(u["moves"]),
        "moved_chip_hours_lost": round(u["moved_chip_hours_lost"], 4),
        "max_moves_per_job": int(u["max_moves_per_job"]),
        "useful_util_no_moves_vs_shared": round(
            s["no-moves"]["useful_utilization"] / s["shared"]["useful_utilization"], 3),
        "jct_mean_s_no_moves": round(s["no-moves"]["jct_mean_s"], 1),
        "fair_share_maxmin_jain": round(u["fair_share_maxmin_jain"], 3),
        "fair_share_shortfall": round(u["fair_share_shortfall"], 4),
        "borrowed_chip_time_jain": round(u["borrowed_chip_time_jain"], 3),
        "reclaim_lost_fraction": round(u["reclaim_lost_fraction"], 4),
        "fairness_preempted_fraction": round(u["fairness_preempted_fraction"], 4),
        "jct_mean_s": round(u["jct_mean_s"], 1),
        "shared_fair_share_maxmin_jain": round(s["shared"]["fair_share_maxmin_jain"], 3),
        "split_jobs_that_fit_one_domain": int(u["split_jobs_that_fit_one_ultraserver"]),
        "guarantee_p99_s_packing": round(s["packing"]["guarantee_p99_s"], 1),
        "guarantee_p99_s_packing_no_moves": round(s["packing-no-moves"]["guarantee_p99_s"], 1),
        "jct_mean_s_packing": round(s["packing"]["jct_mean_s"], 1),
        "jct_mean_s_packing_no_moves": round(s["packing-no-moves"]["jct_mean_s"], 1),
        "useful_util_packing_vs_shared": round(
            s["packing"]["useful_utilization"] / s["shared"]["useful_utilization"], 3),
        "moves_packing": int(s["packing"]["moves"]),
        "teams_worse_than_partitioned": worse,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
