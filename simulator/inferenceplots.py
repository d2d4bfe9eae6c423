"""The report's plots of each inference service over time, one figure a service.

Why four panels a figure: what a reader asks of a scaling policy is in them, on one time
axis: the offered load, the replicas each policy held (and how many of them served), the
p99 TTFT of each window against the objective, and the service's draw. Windows are binned
(time-weighted means; the p99 panel shows each bin's worst window) so a day stays readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from ultraplane.simulator.plots import OTHER_STYLE, Figure
from ultraplane.simulator.records import ReplayResult

__all__ = ["service_plots"]

BINS = 480
STYLES: dict[str, dict[str, Any]] = {
    "ultraplane": {"color": "#1f77b4", "lw": 1.1, "zorder": 3},
    "static-peak": {"color": "#7f7f7f", "lw": 1.6, "ls": "--", "zorder": 1},
    "hpa": {"color": "#d62728", "lw": 1.0, "zorder": 2},
}


def _binned(t: Sequence[float], v: Sequence[float | None], bins: int, how: str
            ) -> tuple[np.ndarray, np.ndarray]:
    ts = np.asarray(t, dtype=float)
    vs = np.asarray([np.nan if x is None else x for x in v], dtype=float)
    if ts.size <= bins:
        return ts, vs
    edges = np.array_split(np.arange(ts.size), bins)
    xs = np.array([ts[e[-1]] for e in edges])
    with np.errstate(all="ignore"):
        if how == "max":
            ys = np.array([np.nanmax(vs[e]) if np.any(~np.isnan(vs[e])) else np.nan
                           for e in edges])
        else:
            ys = np.array([np.nanmean(vs[e]) for e in edges])
    return xs, ys


def service_plots(out: Path, results: Sequence[ReplayResult]) -> list[Figure]:
    """One PNG per service (its policies on each panel); returns the report's figures."""
    names = sorted({s.spec.name for r in results for s in r.services})
    figures: list[Figure] = []
    for name in names:
        runs = [(r.policy, s) for r in results for s in r.services if s.spec.name == name]
        if not runs or not runs[0][1].figures.t:
            figures.append(Figure(f"Service {name}", None, f"Service {name} served no window."))
            continue
        t0 = runs[0][1].start_s
        span = max(s.figures.t[-1] for _, s in runs) - t0
        unit, label = (3600.0, "hours") if span > 3 * 3600 else (60.0, "minutes")
        fig, axes = plt.subplots(4, 1, figsize=(12, 9.5), dpi=100, sharex=True)
        first = runs[0][1]
        x, y = _binned(first.figures.t, first.figures.offered, BINS, "mean")
        axes[0].plot((x - t0) / unit, y, color="black", lw=0.9)
        axes[0].set_ylabel("offered req/s")
        for policy, s in runs:
            style = STYLES.get(policy, OTHER_STYLE)
            f = s.figures
            x, y = _binned(f.t, [float(h) for h in f.held], BINS, "mean")
            axes[1].plot((x - t0) / unit, y, label=f"{policy} held", **style)
            x, y = _binned(f.t, f.ttft_p99_ms, BINS, "max")
            axes[2].plot((x - t0) / unit, y, label=policy, **style)
            x, y = _binned(f.t, f.power_w, BINS, "mean")
            axes[3].plot((x - t0) / unit, y / 1e3, label=policy, **style)
        axes[1].set_ylabel("replicas")
        objective = first.objective
        if objective is not None:
            axes[2].axhline(objective.ttft_ms, color="black", ls=":", lw=1,
                            label=f"objective ({objective.ttft_ms:,.0f} ms)")
        axes[2].set_yscale("log")
        axes[2].set_ylabel("p99 TTFT (ms)")
        axes[3].set_ylabel("service kW")
        axes[3].set_xlabel(f"simulated time since the service started ({label})")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.margins(x=0)
        for ax in axes[1:]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
        axes[0].set_title(f"Service {name}: offered load, replicas, p99 TTFT and power "
                          "under each scaling policy", fontsize=11)
        fig.tight_layout()
        file = f"service_{name}.png"
        fig.savefig(out / file)
        plt.close(fig)
        figures.append(Figure(f"Service {name} over time", file,
                              "Each bin of the p99 TTFT panel shows its worst window."))
    return figures
