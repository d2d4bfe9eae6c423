"""The replay's PNG plots and the HTML page that embeds them.

Why time-weighted resampling: the series holds a sample after every instant
that changed something (hundreds of thousands for a large trace), and the
state is piecewise constant between samples. Averaging each plot bin by the
time each value held (not by sample count) keeps a brief spike from looking
like an hour of load.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from ultraplane.simulator.records import ReplayResult

COLORS = {"ultraplane": "#1f77b4", "first-fit": "#d62728"}
BINS = 600


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
    return (86400.0, "days") if span_s > 3 * 86400 else (3600.0, "hours")


def write_plots(out: Path, results: Sequence[ReplayResult], meta: dict[str, Any]) -> list[tuple[str, str]]:
    """Write the PNGs; returns (file name, caption) pairs in display order."""
    t0 = min(r.t0 for r in results)
    t1 = max(r.t_end for r in results)
    unit, label = _axis(t1 - t0)
    fleet = f"{meta.get('fleet', '')} ({results[0].total_chips:,} chips)"
    images: list[tuple[str, str]] = []

    def line_plot(name: str, title: str, ylabel: str, series: Any, extra: Any = None) -> None:
        fig, ax = plt.subplots(figsize=(12, 3.6), dpi=110)
        for r in results:
            x, y = series(r)
            ax.plot((x - t0) / unit, y, color=COLORS.get(r.policy), lw=1.1, label=r.policy)
        if extra:
            extra(ax)
        ax.set_title(f"{title} - {fleet}", fontsize=11)
        ax.set_xlabel(f"time since trace start ({label})")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=9, frameon=False)
        ax.margins(x=0)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        images.append((name, title))

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

    line_plot("utilization.png", "Chips allocated (%)", "% of chips busy", util,
              lambda ax: ax.set_ylim(0, 100))
    line_plot("power.png", "Fleet power (kW)", "kW", power, power_refs)
    line_plot("queue.png", "Jobs waiting in the queue", "jobs", queue)
    for r in results:
        name = f"heatmap_{r.policy}.png"
        _heatmap(out / name, r, t0, unit, label, fleet)
        images.append((name, f"UltraServer occupancy ({r.policy})"))
    from ultraplane.simulator.tenants import tenant_plots

    images += tenant_plots(out, results, t0, unit, label)
    return images


def _heatmap(path: Path, r: ReplayResult, t0: float, unit: float, label: str, fleet: str) -> None:
    data = np.asarray(r.heat, dtype=float).T if r.heat else np.zeros((len(r.ultraservers), 1))
    n = data.shape[0]
    fig, ax = plt.subplots(figsize=(11, min(2.0 + 0.09 * n, 9.0)), dpi=110)
    x1 = (r.heat_t[-1] - t0) / unit if r.heat_t else 1.0
    im = ax.imshow(100 * data, aspect="auto", interpolation="nearest", cmap="viridis",
                   vmin=0, vmax=100, extent=(0, max(x1, 1e-9), n - 0.5, -0.5))
    step = max(1, n // 16)
    ax.set_yticks(range(0, n, step))
    ax.set_yticklabels([r.ultraservers[i] for i in range(0, n, step)], fontsize=7)
    ax.set_xlabel(f"time since trace start ({label})")
    ax.set_title(f"UltraServer occupancy, {r.policy} - {fleet}", fontsize=11)
    fig.colorbar(im, ax=ax, label="% of chips busy", pad=0.01)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


_ROWS = [
    ("jobs_submitted", "jobs submitted", "{:,.0f}"), ("jobs_completed", "jobs completed", "{:,.0f}"),
    ("jobs_rejected", "jobs rejected (can never fit)", "{:,.0f}"), ("jobs_failed", "jobs failed", "{:,.0f}"),
    ("jct_mean_s", "JCT mean (h)", "h"), ("jct_p50_s", "JCT p50 (h)", "h"), ("jct_p99_s", "JCT p99 (h)", "h"),
    ("queue_delay_mean_s", "queue delay mean (min)", "m"), ("queue_delay_p99_s", "queue delay p99 (min)", "m"),
    ("large_jobs_queue_delay_mean_s", "large jobs' queue delay mean (min)", "m"),
    ("useful_utilization", "useful utilization (trace work / fleet capacity)", "{:.1%}"),
    ("allocated_utilization", "allocated utilization (chips held, incl. slowdowns)", "{:.1%}"),
    ("split_jobs_that_fit_one_ultraserver", "jobs split although they fit one UltraServer",
     "{:,.0f}"),
    ("split_jobs_stretch_p50", "median stretch of those split jobs", "{:.2f}x"),
    ("jct_mean_vs_greedy", "JCT mean / greedy in one domain", "{:.2f}"),
    ("large_wait_vs_greedy", "large jobs' wait / greedy in one domain", "{:.2f}"),
    ("useful_util_vs_greedy", "useful utilization / greedy in one domain", "{:.2f}"),
    ("jct_mean_vs_fluid", "JCT mean / fluid (no topology)", "{:.2f}"),
    ("large_wait_vs_fluid", "large jobs' wait / fluid (no topology)", "{:.2f}"),
    ("useful_util_vs_fluid", "useful utilization / fluid (no topology)", "{:.2f}"),
    ("energy_kwh", "energy (MWh)", "mwh"),
    ("avg_power_kw", "average power (kW)", "{:,.0f}"), ("peak_power_kw", "peak power (kW)", "{:,.0f}"),
]


def _fmt(v: float | None, f: str) -> str:
    if v is None:
        return "n/a"
    if f == "h":
        return f"{v / 3600:,.2f}"
    if f == "m":
        return f"{v / 60:,.1f}"
    if f == "mwh":
        return f"{v / 1000:,.1f}"
    return f.format(v)


def write_html(out: Path, summary: dict[str, Any], images: list[tuple[str, str]], meta: dict[str, Any]) -> None:
    """A single self-contained page: the figures table and the plots inlined."""
    pols = list(summary)
    head = "".join(f"<th>{html.escape(p)}</th>" for p in pols)
    rows = "".join(
        f"<tr><td>{label}</td>" + "".join(f"<td>{_fmt(summary[p].get(k), f)}</td>" for p in pols)
        + "</tr>" for k, label, f in _ROWS)
    bounds: Any = next((summary[p]["bounds"] for p in pols if "bounds" in summary[p]), {})
    brows = "".join(
        f"<tr><td>{html.escape(str(b['name']))}</td><td>{_fmt(b['jct_mean_s'], 'h')}</td>"
        f"<td>{_fmt(b['large_jobs_queue_delay_mean_s'], 'm')}</td>"
        f"<td>{_fmt(b['useful_utilization'], '{:.1%}')}</td></tr>" for b in bounds.values())
    large = html.escape(str(meta.get("large_job_threshold", "")))
    imgs = "".join(
        f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,'
        f'{base64.b64encode((out / name).read_bytes()).decode()}"><figcaption>{html.escape(cap)}'
        f" ({name})</figcaption></figure>" for name, cap in images)
    notes = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in meta.items())
    from ultraplane.simulator.tenants import tenants_html

    tenants = tenants_html(summary)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Ultraplane replay</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1250px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}
td:first-child{{text-align:left}}img{{max-width:100%}}figure{{margin:1.5em 0}}</style></head><body>
<h1>Ultraplane trace replay</h1><p>{large}. Useful utilization counts the trace's own
chip-seconds; allocated utilization every chip-second held (split jobs' slowdown,
checkpoints and lost work included).</p><table><tr><th>figure</th>{head}</tr>{rows}</table>
<h2>Reference replays of the same trace (no overheads)</h2><p>fluid: chips fungible, no
topology, arrival order, every job that fits starts. greedy-in-domain: first fit inside one
UltraServer (larger jobs: the first idle UltraServers), arrival order, never split, no
reservation.</p><table><tr><th>reference</th><th>JCT mean (h)</th>
<th>large jobs' queue delay mean (min)</th><th>useful utilization</th></tr>{brows}</table>
{tenants}
<h2>Run</h2><ul>{notes}</ul><h2>Plots</h2>{imgs}
<p>Files: summary.json, jobs.csv, placements.jsonl. Model and assumptions: docs/simulator.md.</p>
</body></html>
"""
    (out / "report.html").write_text(page)
