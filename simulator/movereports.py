"""Moves in the report: marks on the occupancy heatmap and a table of every move.

Why both: the heatmap shows where and when jobs were moved against how full each UltraServer
was (a move should empty one domain for a waiting gang), and the table says what the mark
cannot: which job moved, for which job, and the work it lost. The replay records each move
as it executes it (`records.MoveRecord`), so this reads plain records only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ultraplane.simulator.records import ReplayResult

__all__ = ["MOVES_SHOWN", "mark_moves", "move_rows"]

MOVES_SHOWN = 200  # rows of the table (jobs.csv's `moves` column counts every one)
_ARROWS = 200  # beyond this many moves, the heatmap marks ends only: arrows would hide it


def mark_moves(ax: Any, r: ReplayResult, t0: float, unit: float) -> None:
    """Mark each move on a heatmap whose rows are `r.ultraservers` (row i at y=i): a cross
    where the job left, a circle where it went, an arrow between them."""
    if not r.move_log:
        return
    row = {us: i for i, us in enumerate(r.ultraservers)}
    xs_from, ys_from, xs_to, ys_to = [], [], [], []
    for m in r.move_log:
        x = (m.t - t0) / unit
        xs_from += [x] * len(m.origin)
        ys_from += [row[us] for us in m.origin]
        xs_to += [x] * len(m.to)
        ys_to += [row[us] for us in m.to]
        if len(r.move_log) <= _ARROWS and m.origin and m.to:
            ax.annotate("", xy=(x, row[m.to[0]]), xytext=(x, row[m.origin[0]]),
                        arrowprops={"arrowstyle": "->", "color": "#ff4d4d", "lw": 1.0})
    ax.scatter(xs_from, ys_from, marker="x", s=36, color="#ff4d4d", zorder=3,
               label="job moved from")
    ax.scatter(xs_to, ys_to, marker="o", s=30, facecolors="none", edgecolors="#ff9f1c",
               linewidths=1.2, zorder=3, label="job moved to")
    ax.legend(loc="upper right", fontsize=8, framealpha=0.7)


def move_rows(results: Sequence[ReplayResult]) -> list[dict[str, str]]:
    """The report's table of moves, in time order per policy, the first `MOVES_SHOWN`."""
    rows = []
    for r in results:
        for m in r.move_log:
            rows.append({"policy": r.policy, "t_h": f"{(m.t - r.t0) / 3600:,.2f}",
                         "job": m.job_id, "origin": ", ".join(m.origin), "to": ", ".join(m.to),
                         "by": m.by, "lost_chip_h": f"{m.lost_chip_s / 3600:,.2f}"})
    return rows[:MOVES_SHOWN]
