"""report.html: one self-contained page rendered from a Jinja2 template.

Why a template: the page has a verdict, explained ratios, the run's settings in
sentences, an energy split, a table and plots; as one f-string it could only
grow into markup nobody can review. The template (package data,
`templates/report.html.j2`) holds the markup with autoescaping on; this module
only prepares plain values for it: formatted table cells, the verdict and the
sentences, and the plots as base64 data URLs so the page needs no other file.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from ultraplane.simulator.descriptions import energy_in_words, settings_in_words
from ultraplane.simulator.plots import Figure
from ultraplane.simulator.tenants import tenant_rows
from ultraplane.simulator.verdicts import REFERENCES, compare

# (summary key, row label, format): the figures table, in reading order
ROWS: tuple[tuple[str, str, str], ...] = (
    ("jobs_submitted", "jobs submitted", "{:,.0f}"),
    ("jobs_completed", "jobs completed", "{:,.0f}"),
    ("jobs_rejected", "jobs rejected (can never fit)", "{:,.0f}"),
    ("jobs_failed", "jobs failed", "{:,.0f}"),
    ("jct_mean_s", "job completion time (JCT), mean (h)", "h"),
    ("jct_p50_s", "JCT, median (h)", "h"),
    ("jct_p99_s", "JCT, 99th percentile (h)", "h"),
    ("queue_delay_mean_s", "wait in the queue, mean (min)", "m"),
    ("queue_delay_p99_s", "wait in the queue, 99th percentile (min)", "m"),
    ("large_jobs_queue_delay_mean_s", "large jobs' wait, mean (min)", "m"),
    ("useful_utilization", "useful utilization (the trace's work / fleet capacity)", "{:.1%}"),
    ("allocated_utilization", "allocated utilization (chips held, slowdowns included)", "{:.1%}"),
    ("split_jobs_that_fit_one_ultraserver", "jobs split although they fit one UltraServer",
     "{:,.0f}"),
    ("split_jobs_stretch_p50", "median stretch of those split jobs", "{:.2f}x"),
    ("jct_mean_vs_greedy", "JCT mean / greedy in one domain (lower is better)", "{:.2f}"),
    ("large_wait_vs_greedy", "large jobs' wait / greedy in one domain (lower is better)", "{:.2f}"),
    ("useful_util_vs_greedy", "useful utilization / greedy in one domain (higher is better)",
     "{:.2f}"),
    ("jct_mean_vs_fluid", "JCT mean / fluid (lower is better)", "{:.2f}"),
    ("large_wait_vs_fluid", "large jobs' wait / fluid (lower is better)", "{:.2f}"),
    ("useful_util_vs_fluid", "useful utilization / fluid (higher is better)", "{:.2f}"),
    ("energy_kwh", "energy (MWh)", "mwh"),
    ("energy_idle_kwh", "of which idle draw (MWh)", "mwh"),
    ("energy_busy_kwh", "of which busy draw (MWh)", "mwh"),
    ("energy_idle_share", "idle draw's share of energy", "{:.0%}"),
    ("avg_power_kw", "average power (kW)", "{:,.0f}"),
    ("peak_power_kw", "peak power (kW)", "{:,.0f}"),
    # tenant queues (simulator/tenants.py), when the trace names tenants
    ("guarantee_p99_s", "kept out of own nominal quota, 99th percentile (min)", "m"),
    ("fair_share_maxmin_jain", "held chips / weighted max-min fair share (Jain)", "{:.3f}"),
    ("fair_share_shortfall", "chips short of fair shares, of the fleet", "{:.1%}"),
    ("borrowed_chip_time_jain", "borrowed chip-time per weight (Jain)", "{:.3f}"),
    ("reclaim_lost_fraction", "chip-time lost to reclaim", "{:.2%}"),
    ("moves", "running jobs moved to make room (moves)", "{:,.0f}"),
    ("moved_chip_hours_lost", "chip-time lost to moves", "{:.2%}"),
)

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("ultraplane.simulator", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True)


def cell(v: Any, f: str) -> str:
    if v is None:
        return "n/a"
    if f == "h":
        return f"{v / 3600:,.2f}"
    if f == "m":
        return f"{v / 60:,.1f}"
    if f == "mwh":
        return f"{v / 1000:,.2f}"
    return f.format(v)


def render(summary: Mapping[str, Mapping[str, Any]], figures: Sequence[Figure],
           images: Mapping[str, str], moves: Sequence[Mapping[str, str]] = ()) -> str:
    """The page's HTML; `images` maps a figure's file name to its data URL; `moves` are the
    rows of the moves table (`movereports.move_rows`)."""
    policies = list(summary)
    first: Mapping[str, Any] = next(iter(summary.values()), {})
    bounds: Mapping[str, Any] = next((s["bounds"] for s in summary.values() if "bounds" in s), {})
    rows = [(label, [cell(summary[p].get(key), f) for p in policies])
            for key, label, f in ROWS if any(key in summary[p] for p in policies)]
    rows += tenant_rows(summary, policies)
    refs = [{"name": b["name"], "jct": cell(b["jct_mean_s"], "h"),
             "wait": cell(b["large_jobs_queue_delay_mean_s"], "m"),
             "util": cell(b["useful_utilization"], "{:.1%}"),
             "what": REFERENCES.get(short, (short, ""))[1]} for short, b in bounds.items()]
    return _ENV.get_template("report.html.j2").render(
        verdict=compare(summary), policies=policies, rows=rows, refs=refs,
        energy={p: energy_in_words(s) for p, s in summary.items()},
        settings=settings_in_words(first), large=str(first.get("large_job_threshold", "")),
        figures=figures, images=images, moves=moves,
        moves_total=sum(int(s.get("moves") or 0) for s in summary.values()))


def write_html(out: Path, summary: Mapping[str, Mapping[str, Any]],
               figures: Sequence[Figure], moves: Sequence[Mapping[str, str]] = ()) -> None:
    """Write out/report.html with every plot inlined."""
    images = {f.file: "data:image/png;base64," + base64.b64encode((out / f.file).read_bytes())
              .decode() for f in figures if f.file}
    (out / "report.html").write_text(render(summary, figures, images, moves))
