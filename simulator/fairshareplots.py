"""The report's fair-share figure: each team's chips held against its fair share over time.

Why one panel per team: teams differ in size by orders of magnitude, so on one shared axis
the small teams' lines lie flat on zero. Each panel has its own scale and shows the two step
lines the fairness figures integrate (`simulator/tenants.py`): chips held, and the weighted
max-min fair share capped at demand (`ultraplane.policies.fairshares`). Where held stays
below the share the team was owed chips; above it, it borrowed what nobody else wanted or
kept what another team was owed.

The ledger records both series once per change, so they are drawn as exact steps; a series
longer than a few plot widths is first averaged over time bins (`plots.resample`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from ultraplane.simulator.records import ReplayResult, Steps

__all__ = ["fair_share_plots"]

_COLUMNS = 3
_MAX_STEPS = 2400  # beyond this, time-weighted bins (each step would be under a pixel)


def _curve(steps: Steps, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of a step series from t0 to t1, zero before its first sample."""
    from ultraplane.simulator.plots import BINS, resample

    if len(steps.t) > _MAX_STEPS:
        x, y = resample(steps.t, steps.v, t0, t1, BINS)
        return np.append(x, t1), np.append(y, y[-1])
    ts = [t0, *steps.t, t1]
    vs = [0.0, *steps.v, steps.v[-1] if steps.v else 0.0]
    return np.asarray(ts, dtype=float), np.asarray(vs, dtype=float)


def fair_share_plots(out: Path, results: Sequence[ReplayResult], t0: float, unit: float,
                     label: str) -> list[tuple[str, str]]:
    """One PNG per policy with tenant queues: a panel per team, held chips and fair share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images: list[tuple[str, str]] = []
    for r in results:
        f = r.tenants
        if f is None or not any(s.t for s in f.fair.values()):
            continue
        teams = sorted(f.fair)
        cols = min(_COLUMNS, len(teams))
        rows = math.ceil(len(teams) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(12, 0.8 + 2.1 * rows), dpi=110,
                                 sharex=True, squeeze=False)
        flat: list[Any] = list(axes.flat)
        for ax, team in zip(flat, teams, strict=False):
            # held wide and light underneath, the share thin and dashed on top: where they are
            # equal (a fair instant) both stay visible
            for steps, style in ((f.held[team], {"color": "#1f77b4", "lw": 2.4, "alpha": 0.55,
                                                 "label": "chips held"}),
                                 (f.fair[team], {"color": "#222222", "ls": "--", "lw": 1.0,
                                                 "label": "fair share"})):
                x, y = _curve(steps, r.t0, r.t_end)
                ax.step((x - t0) / unit, y, where="post", **style)
            ax.set_title(f"{team} (weight {f.weight[team]:g}, nominal {f.nominal[team]:,})",
                         fontsize=9)
            ax.grid(alpha=0.3)
            ax.margins(x=0)
            ax.tick_params(labelsize=8)
        for ax in flat[len(teams):]:
            ax.axis("off")
        flat[0].legend(loc="upper right", fontsize=8, frameon=False)
        fig.suptitle(f"Chips held against fair share, per team - {r.policy}", fontsize=11)
        fig.supxlabel(f"time since trace start ({label})", fontsize=9)
        fig.supylabel("chips", fontsize=9)
        fig.tight_layout()
        name = f"fairshare_{r.policy}.png"
        fig.savefig(out / name)
        plt.close(fig)
        images.append((name, f"Chips held against fair share, per team ({r.policy})"))
    return images
