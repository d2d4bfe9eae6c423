"""Tenants in a replay: what each tenant got while the trace ran.

Its queues are read by the core (`ultraplane.policies.queuedocuments.queue_file`, the file
`ultraplane serve --queues` reads too); without one, each tenant gets an equal share
(`quotas.equal_shares`).

Why a ledger beside the replay loop: the fleet-wide figures of a shared fleet (was a tenant
kept out of its own guarantee, was borrowed capacity shared by weight, how much work did
reclaim throw away) are integrals over time of per-tenant state, so they are counted as the
replay advances, from the same instants the loop pops, and reported after it.

- `guarantee_p99_s`: for each job, the time it waited while it would have fit in its tenant's
  unused nominal quota; the 99th percentile over the jobs that ever waited so. Jobs of one
  size in one tenant share that state, so a clock per (tenant, size) runs while it holds and
  each job reads it when it starts waiting and when it stops.
- `fair_share_maxmin_jain` (issue 37): at each instant every tenant's fair share is its
  weighted max-min share of the fleet capped at its demand (running plus waiting chips;
  `ultraplane.policies.fairshares`). Over the time the tenants together want more than the
  fleet, the time-weighted mean of Jain's index of (chips held / fair share) over the tenants
  with a share above 0: 1.0 when each holds exactly its share, and not lowered by chips idle
  for everyone. `fair_share_shortfall` is the time-weighted mean, over the same time, of
  the sum of max(0, fair - held) over the fleet's chips. Without contention both are 1 and 0.
- `borrowed_chip_time_jain`: Jain's index, over the tenants that wanted more than their
  nominal quota (running plus waiting chips above it) at some time, of their borrowed
  chip-time over weight (issue 30's `fair_share_jain`, renamed for what it measures: it is
  low even for a fair scheduler when one team wanted more for an hour and another for a
  month); `borrowed_chip_time_jain_rate` is the same index with each tenant's borrowed
  chip-time taken per second it wanted more.
- For the report's fair-share figure (`simulator/fairshareplots.py`), each tenant's chips
  held and fair share are recorded as step series, one sample per change: fair shares are
  computed once per instant whose demand changed (and the fairness figures read that cache).
- `reclaim_lost_fraction`: chip-time lost to reclaim preemption (work since the victim's last
  checkpoint) over all chip-time used; `fairness_preempted_fraction` the same for
  fair-sharing preemption.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ultraplane.simulator.records import Steps

from ultraplane.policies.fairshares import fair_shares, jain
from ultraplane.policies.quotas import QueueSpec

__all__ = ["TenantFigures", "TenantLedger", "tenant_plots", "tenant_rows", "tenant_summary"]


@dataclass
class TenantFigures:
    """What the ledger counted, per tenant (chip-seconds, seconds) and per job."""

    nominal: dict[str, int]
    weight: dict[str, float]
    used_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    borrowed_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    # time its demand (running plus waiting chips) was above its nominal quota
    wanted_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    lost_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    fair_lost_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    contended_s: float = 0.0  # time the tenants together wanted more than the fleet
    maxmin_jain_s: float = 0.0  # the integral of the max-min Jain index over that time
    shortfall_s: float = 0.0  # the integral of the shortfall (a fraction of the fleet)
    # per tenant, over that time: chip-time held, and chip-time of its fair share
    held_contended_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    fair_cs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    guarantee_s: dict[str, float] = field(default_factory=dict)  # job -> time kept out
    t: list[float] = field(default_factory=list)
    used: dict[str, list[int]] = field(default_factory=dict)  # samples for the plot
    # per tenant, one sample per change: chips held, and its fair share (the fair-share plot)
    held: dict[str, Steps] = field(default_factory=dict)
    fair: dict[str, Steps] = field(default_factory=dict)
    span_s: float = 0.0

    def fleet(self) -> dict[str, float]:
        waits = sorted(v for v in self.guarantee_s.values() if v > 0)
        p99 = waits[min(len(waits) - 1, math.ceil(0.99 * len(waits)) - 1)] if waits else 0.0
        wanting = [t for t in self.nominal if self.wanted_s[t]]
        # per unit of the time each wanted more: tenants that wanted more for an hour and for a
        # week are compared by what they got while they wanted it
        rate = jain([self.borrowed_cs[t] / self.weight[t] / self.wanted_s[t] for t in wanting])
        total = jain([self.borrowed_cs[t] / self.weight[t] for t in wanting])
        used = sum(self.used_cs.values())
        lost = sum(self.lost_cs.values()) / used if used else 0.0
        fair_lost = sum(self.fair_lost_cs.values()) / used if used else 0.0
        contended = self.contended_s
        return {"guarantee_p99_s": p99,
                "fair_share_maxmin_jain": self.maxmin_jain_s / contended if contended else 1.0,
                "fair_share_shortfall": self.shortfall_s / contended if contended else 0.0,
                "borrowed_chip_time_jain": total, "borrowed_chip_time_jain_rate": rate,
                "reclaim_lost_fraction": lost, "fairness_preempted_fraction": fair_lost}


class TenantLedger:
    """Per-tenant usage and waits, advanced by the replay at every instant it pops."""

    def __init__(self, specs: Sequence[QueueSpec], start: float, *, sample_s: float,
                 fleet_chips: int | None = None) -> None:
        self.figures = TenantFigures({s.name: sum(s.nominal.values()) for s in specs},
                                     {s.name: s.weight for s in specs})
        self.figures.used = {s.name: [] for s in specs}
        self.figures.held = {s.name: Steps() for s in specs}
        self.figures.fair = {s.name: Steps() for s in specs}
        self._t = self._t0 = start
        self._sample_s = sample_s
        self._next_sample = start
        # without the fleet's size, the quotas' sum (the fleet when every chip is someone's)
        self._fleet = fleet_chips if fleet_chips is not None else sum(self.figures.nominal.values())
        self.used: Counter[str] = Counter()
        self._waiting: dict[str, Counter[int]] = {s.name: Counter() for s in specs}
        self._demand: Counter[str] = Counter()
        self._clock: dict[tuple[str, int], float] = {}  # time the size fit the unused nominal
        self._since: dict[str, tuple[str, int, float]] = {}  # job -> (tenant, chips, clock)
        # Fair shares change only when demand does (a start moves chips from waiting to held):
        # computed once per instant that changed it, recorded, and scored from the cache.
        self._changed = True
        self._wanted: dict[str, int] = {}
        self._shares: dict[str, float] = {}

    def advance(self, t: float) -> None:
        dt = t - self._t
        f = self.figures
        if self._changed:
            self._share_out()
        if dt > 0:
            for tenant, nominal in f.nominal.items():
                used = self.used[tenant]
                f.used_cs[tenant] += used * dt
                if used > nominal:
                    f.borrowed_cs[tenant] += (used - nominal) * dt
                if used + self._demand[tenant] > nominal:
                    f.wanted_s[tenant] += dt
                free = nominal - used
                for chips, n in self._waiting[tenant].items():
                    if n and chips <= free:
                        key = (tenant, chips)
                        self._clock[key] = self._clock.get(key, 0.0) + dt
            self._score_fairness(dt)
        self._t = t
        if t >= self._next_sample:
            f.t.append(t)
            for tenant, series in f.used.items():
                series.append(self.used[tenant])
            self._next_sample = t + self._sample_s

    def _share_out(self) -> None:
        """Each tenant's fair share of the state set at `self._t`, recorded on change."""
        f = self.figures
        self._wanted = {t: self.used[t] + self._demand[t] for t in f.nominal}
        self._shares = fair_shares(self._wanted, f.weight, self._fleet)
        for tenant, share in self._shares.items():
            f.fair[tenant].add(self._t, share)
        self._changed = False

    def _score_fairness(self, dt: float) -> None:
        """Add `dt` of the max-min fairness figures, if the tenants want more than the fleet."""
        f = self.figures
        if sum(self._wanted.values()) <= self._fleet:
            return
        fair = self._shares
        owed = [t for t, share in fair.items() if share > 0]
        f.contended_s += dt
        for t, share in fair.items():
            f.fair_cs[t] += share * dt
            f.held_contended_cs[t] += self.used[t] * dt
        f.maxmin_jain_s += jain([self.used[t] / fair[t] for t in owed]) * dt
        short = sum(max(0.0, fair[t] - self.used[t]) for t in owed)
        f.shortfall_s += short / self._fleet * dt

    def wait(self, job: str, tenant: str, chips: int) -> None:
        if tenant not in self._waiting:
            return
        self._waiting[tenant][chips] += 1
        self._demand[tenant] += chips
        self._since[job] = (tenant, chips, self._clock.get((tenant, chips), 0.0))
        self._changed = True

    def unwait(self, job: str) -> None:
        got = self._since.pop(job, None)
        if got is None:
            return
        tenant, chips, clock = got
        self._waiting[tenant][chips] -= 1
        self._demand[tenant] -= chips
        self._changed = True
        kept = self._clock.get((tenant, chips), 0.0) - clock
        self.figures.guarantee_s[job] = self.figures.guarantee_s.get(job, 0.0) + kept

    def hold(self, tenant: str, chips: int) -> None:
        self.used[tenant] += chips
        self._held(tenant)

    def release(self, tenant: str, chips: int) -> None:
        self.used[tenant] -= chips
        self._held(tenant)

    def _held(self, tenant: str) -> None:
        steps = self.figures.held.get(tenant)
        if steps is not None:  # a tenant the queues name (the others are not plotted)
            steps.add(self._t, self.used[tenant])
            self._changed = True

    def reclaimed(self, tenant: str, chip_s: float) -> None:
        self.figures.lost_cs[tenant] += chip_s

    def preempted_for_fairness(self, tenant: str, chip_s: float) -> None:
        self.figures.fair_lost_cs[tenant] += chip_s

    def close(self, t: float, waiting: Iterable[str]) -> TenantFigures:
        self.advance(t)
        for job in list(waiting):
            self.unwait(job)
        for job in list(self._since):
            self.unwait(job)
        self.figures.span_s = t - self._t0
        return self.figures


def tenant_summary(result: Any) -> dict[str, Any]:
    """summary.json's tenant figures of one replay (a `ReplayResult` with `tenants`)."""
    f: TenantFigures = result.tenants
    span = max(f.span_s, 1e-9)
    per: dict[str, dict[str, Any]] = {}
    for tenant, nominal in sorted(f.nominal.items()):
        done = [x for x in result.records if x.tenant == tenant and x.jct_s is not None]
        waits = [x.queue_delay_s for x in result.records
                 if x.tenant == tenant and x.queue_delay_s is not None]
        per[tenant] = {
            "nominal_chips": nominal,
            "weight": f.weight[tenant],
            "chips_used_mean": f.used_cs[tenant] / span,
            "chips_borrowed_mean": f.borrowed_cs[tenant] / span,
            "jct_mean_s": sum(x.jct_s for x in done) / len(done) if done else None,
            "queue_delay_mean_s": sum(waits) / len(waits) if waits else None,
            "chip_hours_lost_to_reclaim": f.lost_cs[tenant] / 3600.0,
            # chips held over its fair share while the tenants wanted more than the fleet
            "held_vs_fair_share": (f.held_contended_cs[tenant] / f.fair_cs[tenant]
                                   if f.fair_cs[tenant] else None),
            "jobs": sum(x.tenant == tenant for x in result.records),
        }
    return {**f.fleet(), "tenants": per}


def tenant_rows(summary: Mapping[str, Mapping[str, Any]],
                policies: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The report's rows of per-tenant figures (a row per tenant, a cell per policy)."""
    names = sorted({t for p in policies for t in summary[p].get("tenants", {})})
    rows = []
    for tenant in names:
        cells = []
        for p in policies:
            v = summary[p].get("tenants", {}).get(tenant)
            cells.append("n/a" if v is None else (
                f"nominal {v['nominal_chips']:,}, used {v['chips_used_mean']:,.0f}, borrowed "
                f"{v['chips_borrowed_mean']:,.0f} (mean chips); JCT {_h(v['jct_mean_s'])} h, "
                f"wait {_h(v['queue_delay_mean_s'])} h; "
                f"{v['chip_hours_lost_to_reclaim']:,.1f} chip-h lost to reclaim"))
        rows.append((f"tenant {tenant}", cells))
    return rows


def _h(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 3600:,.2f}"


def tenant_plots(out: Path, results: Sequence[Any], t0: float, unit: float,
                 label: str) -> list[tuple[str, str]]:
    """One PNG per policy with tenants: each tenant's chips over time against its nominal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images: list[tuple[str, str]] = []
    for r in results:
        f: TenantFigures | None = r.tenants
        if f is None or not f.t:
            continue
        fig, ax = plt.subplots(figsize=(12, 3.6), dpi=110)
        xs = [(t - t0) / unit for t in f.t]
        for i, (tenant, series) in enumerate(sorted(f.used.items())):
            color = f"C{i % 10}"
            ax.step(xs, series, where="post", color=color, lw=1.0, label=tenant)
            ax.axhline(f.nominal[tenant], color=color, ls="--", lw=0.8)
        ax.set_title(f"Chips used per tenant (dashed: nominal quota) - {r.policy}", fontsize=11)
        ax.set_xlabel(f"time since trace start ({label})")
        ax.set_ylabel("chips")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=9, frameon=False)
        ax.margins(x=0)
        fig.tight_layout()
        name = f"tenants_{r.policy}.png"
        fig.savefig(out / name)
        plt.close(fig)
        images.append((name, f"Chips per tenant against nominal ({r.policy})"))
    return images
