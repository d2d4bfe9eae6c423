"""The replay's PNG plots, each with the sentence that stands in for it when it would be empty.

Why time-weighted resampling: the series holds a sample after every instant
that changed something (hundreds of thousands for a large trace), and the
state is piecewise constant between samples. Averaging each plot bin by the
time each value held (not by sample count) keeps a brief spike from looking
like an hour of load.

Why the styles: policies often tie (a light trace places every job the same
way), and two identical lines drawn one over the other show only the last.
ultraplane is always a thin solid line drawn on top of first-fit's wide dashed
one, so both stay visible, and a tie is also said in words on the plot and in
its caption. A series that is zero throughout (no job ever queued) becomes a
sentence instead of a flat line on a meaningless axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator
from ultraplane.simulator.movereports import mark_moves
from ultraplane.simulator.records import ReplayResult

BINS = 600
X_LABEL = "simulated time since the trace's first submission ({unit})"
# Drawn in this order (zorder): later entries on top of earlier ones.
STYLES: dict[str, dict[str, Any]] = {
    "first-fit": {"color": "#d62728", "lw": 2.8, "ls": (0, (5, 2)), "alpha": 0.8, "zorder": 2},
    "ultraplane": {"color": "#1f77b4", "lw": 1.2, "ls": "-", "alpha": 1.0, "zorder": 3},
}
OTHER_STYLE: dict[str, Any] = {"color": "#555555", "lw": 1.6, "ls": ":", "alpha": 1.0, "zorder": 1}


@dataclass(frozen=True)
class Figure:
    """One plot of the report: its PNG, or (`file` None) the sentence said instead of it."""

    title: str
    file: str | None
    note: str = ""


def styles(policies: Sequence[str], *, tied: bool) -> dict[str, dict[str, Any]]:
    """Line style per policy; when the lines coincide, ultraplane also gets markers."""
    out = {p: dict(STYLES.get(p, OTHER_STYLE)) for p in policies}
    if tied and "ultraplane" in out:
        out["ultraplane"].update(marker="o", markersize=3.5, markevery=0.05)
    return out


def coincide(ys: Sequence[np.ndarray]) -> bool:
    """Whether every series equals the first (to rounding): their lines would hide each other."""
    if len(ys) < 2:
        return False
    scale = max(float(np.max(np.abs(y))) if y.size else 0.0 for y in ys) or 1.0
    return all(y.shape == ys[0].shape and np.allclose(y, ys[0], rtol=0, atol=1e-9 * scale)
               for y in ys[1:])


def resample(t: Sequence[float], v: Sequence[float], t0: float, t1: float, bins: int = BINS
             ) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean of a piecewise-constant series over `bins` equal bins."""
    ts = np.asarray(t, dtype=float)
    vs = np.asarray(v, dtype=float)
    edges = np.linspace(t0, t1, bins + 1)
    if ts.size == 0 or t1 <= t0:
        return edges[:-1], np.zeros(bins)
    # integral of the step function at each sample time, then at the bin edges
    widths = np.diff(np.append(ts, max(t1, ts[-1])))
    cum = np.concatenate([[0.0], np.cumsum(vs * widths)])
    knots = np.append(ts, max(t1, ts[-1]))

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, len(ts) - 1)
        before = x < ts[0]
        val = cum[i] + vs[i] * (x - knots[i])
        return np.where(before, 0.0, val)

    area = np.diff(integral(edges))
    return edges[:-1], area / np.diff(edges)


def _axis(span_s: float) -> tuple[float, str]:
    if span_s > 3 * 86400:
        return 86400.0, "days"
    return (3600.0, "hours") if span_s > 3 * 3600 else (60.0, "minutes")


def _tie_note(policies: Sequence[str]) -> str:
    return (f"{' and '.join(policies)} coincide here: ultraplane's solid line (with dots) is "
            "drawn over first-fit's dashed one.")


def write_plots(out: Path, results: Sequence[ReplayResult], meta: dict[str, Any]) -> list[Figure]:
    """Write the PNGs; returns the report's figures in display order."""
    t0 = min(r.t0 for r in results)
    t1 = max(r.t_end for r in results)
    unit, label = _axis(t1 - t0)
    fleet = f"{meta.get('fleet', '')} ({results[0].total_chips:,} chips)"
    policies = [r.policy for r in results]
    figures: list[Figure] = []

    def line_plot(name: str, title: str, ylabel: str, series: Any, extra: Any = None) -> None:
        curves = [series(r) for r in results]
        tied = coincide([y for _, y in curves])
        style = styles(policies, tied=tied)
        fig, ax = plt.subplots(figsize=(12, 3.6), dpi=110)
        for r, (x, y) in sorted(zip(results, curves, strict=True),
                                key=lambda item: style[item[0].policy]["zorder"]):
            ax.plot((x - t0) / unit, y, label=r.policy, **style[r.policy])
        if extra:
            extra(ax)
        note = _tie_note(policies) if tied else ""
        if tied:
            ax.text(0.99, 0.96, "policies coincide", transform=ax.transAxes, ha="right",
                    va="top", fontsize=9, color="#333333",
                    bbox={"boxstyle": "round", "fc": "white", "ec": "#999999"})
        ax.set_title(f"{title} - {fleet}", fontsize=11)
        ax.set_xlabel(X_LABEL.format(unit=label))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=9, frameon=False)
        ax.margins(x=0)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        figures.append(Figure(title, name, note))

    def util(r: ReplayResult) -> tuple[np.ndarray, np.ndarray]:
        x, y = resample(r.series.t, r.series.busy, t0, t1)
        return x, 100.0 * y / r.total_chips

    def power(r: ReplayResult) -> tuple[np.ndarray, np.ndarray]:
        x, y = resample(r.series.t, r.series.power_w, t0, t1)
        return x, y / 1e3

    def queue(r: ReplayResult) -> tuple[np.ndarray, np.ndarray]:
        return resample(r.series.t, r.series.queued, t0, t1)

    idle_kw = meta.get("idle_power_kw")
    peak_kw = meta.get("peak_power_kw_all_busy")

    def power_refs(ax: Any) -> None:
        ax.set_ylim(0, (peak_kw or ax.get_ylim()[1]) * 1.06)
        if idle_kw:
            ax.axhline(idle_kw, color="grey", ls=":", lw=1, label=f"all idle ({idle_kw:,.0f} kW)")
        if peak_kw:
            ax.axhline(peak_kw, color="black", ls="--", lw=1, label=f"all at peak ({peak_kw:,.0f} kW)")
        drawn: set[tuple[str, float]] = set()
        for r in results:  # every power budget's line (simulator/powerside.py)
            for name, watts in (r.power.budgets if r.power is not None else []):
                if (name, watts) not in drawn:
                    drawn.add((name, watts))
                    ax.axhline(watts / 1e3, color="#c0392b", ls="-.", lw=1,
                               label=f"budget {name} ({watts / 1e3:,.0f} kW)")

    most_queued = max((max(r.series.queued, default=0) for r in results), default=0)

    def queue_axis(ax: Any) -> None:
        ax.set_ylim(0, max(1.0, most_queued * 1.1))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))

    if any(max(r.series.busy, default=0) > 0 for r in results):
        line_plot("utilization.png", "Chips allocated (%)", "% of chips busy", util,
                  lambda ax: ax.set_ylim(0, 100))
    else:
        figures.append(Figure("Chips allocated (%)", None,
                              "No job ran under any policy, so no chip was ever allocated."))
    line_plot("power.png", "Fleet power (kW)", "kW", power, power_refs)
    if most_queued > 0:
        line_plot("queue.png", "Jobs waiting in the queue", "jobs", queue, queue_axis)
    else:
        figures.append(Figure("Jobs waiting in the queue", None,
                              "No job ever waited in the queue under any policy: each one "
                              "started the moment it was submitted (or was refused because it "
                              "can never fit), so there is no queue to plot."))
    for r in results:
        title = f"UltraServer occupancy ({r.policy})"
        if r.heat and any(any(row) for row in r.heat):
            name = f"heatmap_{r.policy}.png"
            _heatmap(out / name, r, t0, unit, label, fleet)
            note = (f"{len(r.move_log)} moves marked: a cross where a job left, a circle "
                    "where it went." if r.move_log else "")
            figures.append(Figure(title, name, note))
        else:
            figures.append(Figure(title, None, f"No UltraServer ran a job under {r.policy}."))
    from ultraplane.simulator.tenants import tenant_plots

    figures += [Figure(title, name) for name, title in tenant_plots(out, results, t0, unit, label)]
    from ultraplane.simulator.fairshareplots import fair_share_plots

    figures += [Figure(title, name)
                for name, title in fair_share_plots(out, results, t0, unit, label)]
    from ultraplane.simulator.powerreports import energy_plot

    figures += [Figure(title, name) for name, title in energy_plot(out, results)]
    return figures


def _heatmap(path: Path, r: ReplayResult, t0: float, unit: float, label: str, fleet: str) -> None:
    data = np.asarray(r.heat, dtype=float).T
    n = data.shape[0]
    fig, ax = plt.subplots(figsize=(11, min(2.0 + 0.09 * n, 9.0)), dpi=110)
    x1 = (r.heat_t[-1] - t0) / unit if r.heat_t else 1.0
    im = ax.imshow(100 * data, aspect="auto", interpolation="nearest", cmap="viridis",
                   vmin=0, vmax=100, extent=(0, max(x1, 1e-9), n - 0.5, -0.5))
    step = max(1, n // 16)
    ax.set_yticks(range(0, n, step))
    ax.set_yticklabels([r.ultraservers[i] for i in range(0, n, step)], fontsize=7)
    ax.set_xlabel(X_LABEL.format(unit=label))
    ax.set_title(f"UltraServer occupancy, {r.policy} - {fleet}", fontsize=11)
    mark_moves(ax, r, t0, unit)
    fig.colorbar(im, ax=ax, label="% of chips busy", pad=0.01)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
