"""report.html and summary.json read by a person: verdict first, ties visible, no empty plot,
energy split, settings in words, simulated times, no NaN; the README's sample trace runs."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from ultraplane.simulator.plots import coincide, styles
from ultraplane.simulator.verdicts import compare

from ultraplane.cli import main
from ultraplane.hardware.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]


def no_nan(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}")

    return json.loads(text, parse_constant=refuse)


def simulate(tmp_path: Path, rows: str, *args: str) -> tuple[dict[str, Any], str, Path]:
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--out", str(out),
                                    "--no-progress", *args])
    assert res.exit_code == 0, res.output
    return no_nan((out / "summary.json").read_text()), (out / "report.html").read_text(), out


def text_of(html: str) -> str:
    """The page's words in order, tags and inlined images dropped."""
    html = re.sub(r"<style>.*?</style>", "", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split()).replace("&#39;", "'")


def test_readme_simulate_line_replays_the_sample_trace(tmp_path: Path) -> None:
    line = next(x for x in (ROOT / "README.md").read_text().splitlines()
                if x.startswith("ultraplane simulate"))
    args = shlex.split(line, comments=True)[1:]
    assert "examples/traces/sample.csv" in args
    args[args.index("--out") + 1] = str(tmp_path / "report")
    args[args.index("--trace") + 1] = str(ROOT / args[args.index("--trace") + 1])
    res = CliRunner().invoke(main, [*args, "--no-progress"])
    assert res.exit_code == 0, res.output
    # the command line says the verdict before the figures
    assert res.output.splitlines()[0].startswith(("ultraplane ", "Mixed result"))
    summary = no_nan((tmp_path / "report" / "summary.json").read_text())
    for s in summary.values():
        assert s["jobs_submitted"] == s["jobs_completed"] >= 300 and s["jobs_rejected"] == 0
        assert s["simulated"] is True
    page = (tmp_path / "report" / "report.html").read_text()
    assert "nan" not in text_of(page).lower().split()
    assert (tmp_path / "report" / "queue.png").exists()  # the sample trace does queue


def test_the_verdict_comes_first_and_says_which_way_is_better(tmp_path: Path) -> None:
    # one UltraServer: a 100-chip job holds it; 'b' (80 chips) and 'c' (8 chips) arrive.
    # Both policies see the same trace; whatever they do, the page leads with the verdict.
    _, html, _ = simulate(tmp_path, "a,0,3000,100\nb,10,1000,80\nc,20,500,8\n",
                          "--fleet", "trn3-gen2:1")
    words = text_of(html)
    headings = re.findall(r"<h2[^>]*>(.*?)</h2>", html)
    assert headings[0] == "Verdict"
    verdict_at = words.index("Verdict")
    assert verdict_at < words.index("Figures") < words.index("Run")
    assert "What the ratios mean" in words and "lower is better" in words
    assert re.search(r"JCT mean x\d\.\d\d vs greedy: under ultraplane, jobs took", words)


def test_compare_counts_lower_times_and_higher_utilization_as_better() -> None:
    base = {"jobs_completed": 10, "jct_mean_s": 7200.0, "queue_delay_mean_s": 600.0,
            "large_jobs_queue_delay_mean_s": 0.0, "large_jobs": 0, "useful_utilization": 0.5,
            "split_jobs_that_fit_one_ultraserver": 0, "energy_kwh": 1000.0}
    better = {**base, "jct_mean_s": 3600.0, "useful_utilization": 0.6}
    v = compare({"ultraplane": better, "first-fit": base})
    assert v.headline.startswith("ultraplane did better than first-fit")
    assert any("50% lower" in p for p in v.points if p.startswith("Better: Mean job completion"))
    assert any(p.startswith("Better: Useful utilization") for p in v.points)
    assert not any(p.startswith("Worse") for p in v.points)
    v = compare({"ultraplane": base, "first-fit": better})
    assert v.headline.startswith("ultraplane did worse")
    near = {**base, "jct_mean_s": 7200.0 * 1.005, "energy_kwh": 1004.0}  # within 1%
    v = compare({"ultraplane": near, "first-fit": base})
    assert v.headline.startswith("ultraplane and first-fit performed the same") and not v.points


def test_ties_are_said_and_drawn_visibly(tmp_path: Path) -> None:
    # two small jobs on an empty UltraServer: both policies place them identically
    summary, html, out = simulate(tmp_path, "a,0,1000,8\nb,100,2000,16\n",
                                  "--fleet", "trn3-gen2:1")
    assert summary["ultraplane"]["jct_mean_s"] == summary["first-fit"]["jct_mean_s"]
    words = text_of(html)
    assert "ultraplane and first-fit performed the same" in words
    assert "ultraplane and first-fit coincide here" in words
    assert (out / "utilization.png").exists() and (out / "power.png").exists()
    # ultraplane is drawn above first-fit, in another line style, with markers on a tie
    tied = styles(["ultraplane", "first-fit"], tied=True)
    assert tied["ultraplane"]["zorder"] > tied["first-fit"]["zorder"]
    assert tied["ultraplane"]["ls"] != tied["first-fit"]["ls"]
    assert tied["first-fit"]["lw"] > tied["ultraplane"]["lw"]  # the wider line shows around it
    assert "marker" in tied["ultraplane"]
    assert "marker" not in styles(["ultraplane", "first-fit"], tied=False)["ultraplane"]


def test_coincide_tells_equal_series_from_different_ones() -> None:
    y = np.array([0.0, 5.0, 5.0, 2.0])
    assert coincide([y, y.copy()])
    assert not coincide([y, y + np.array([0, 0, 0.5, 0])])
    assert not coincide([y])


def test_no_empty_plot_when_nothing_queues_or_nothing_runs(tmp_path: Path) -> None:
    # the only job can never fit: nothing runs, nothing waits
    summary, html, out = simulate(tmp_path, "huge,0,100,9999\n", "--fleet", "trn3-gen2:1")
    assert summary["ultraplane"]["jobs_rejected"] == 1
    assert not (out / "queue.png").exists() and not (out / "utilization.png").exists()
    assert not list(out.glob("heatmap_*.png"))
    words = text_of(html)
    assert "No job ever waited in the queue" in words
    assert "No job ran under any policy" in words
    assert "nan" not in words.lower().split()
    for s in summary.values():  # nothing completed: the ratios are null, never NaN
        assert s["jct_mean_vs_greedy"] is None and s["simulated"] is True


def test_a_queue_that_forms_is_plotted(tmp_path: Path) -> None:
    # 'b' waits for 'a' (each takes the whole UltraServer)
    _, _, out = simulate(tmp_path, "a,0,1000,144\nb,10,100,144\n", "--fleet", "trn3-gen2:1")
    assert (out / "queue.png").read_bytes()[:4] == b"\x89PNG"


def test_energy_splits_into_idle_and_busy_draw_that_sum_to_the_total(tmp_path: Path) -> None:
    summary, html, out = simulate(tmp_path, "a,0,3600,72\nb,600,1800,8\n",
                                "--fleet", "trn3-gen2:2")
    chip = load_profile("trn3-gen2").chip
    for s in summary.values():
        floor_kw = 2 * 144 * float(chip.idle_watts) / 1e3
        assert s["idle_power_kw"] == pytest.approx(floor_kw)
        assert s["energy_idle_kwh"] == pytest.approx(floor_kw * s["makespan_s"] / 3600)
        assert s["energy_idle_kwh"] + s["energy_busy_kwh"] == pytest.approx(s["energy_kwh"])
        assert s["energy_busy_kwh"] > 0
        assert s["energy_idle_share"] == pytest.approx(s["energy_idle_kwh"] / s["energy_kwh"])
    share = summary["ultraplane"]["energy_idle_share"]
    assert f"({share:.0%}) was idle draw" in text_of(html)
    # the idle draw of chips that held no job: every chip-second less the jobs' (from jobs.csv)
    with (out / "jobs.csv").open() as fh:
        held = sum(int(r["chips"]) * (float(r["end_s"]) - float(r["start_s"]))
                   for r in csv.DictReader(fh) if r["policy"] == "ultraplane")
    s = summary["ultraplane"]
    free_chip_s = 2 * 144 * s["makespan_s"] - held
    assert s["energy_idle_unallocated_kwh"] == pytest.approx(
        float(chip.idle_watts) * free_chip_s / 3.6e6)
    assert "Chips that held no job drew" in text_of(html)


def test_the_run_section_says_its_settings_in_words(tmp_path: Path) -> None:
    _, html, _ = simulate(tmp_path, "big,0,1000,144\nafter,10,100,4\n", "--fleet", "trn3-gen2:1",
                          "--fail", "700:gen2-0000/s00", "--checkpoint-interval", "900",
                          "--no-reservation")
    words = text_of(html)
    run = words[words.index(" Run ") :]
    assert "Fleet trn3-gen2:1: 1 UltraServer, 144 Trainium chips." in run
    assert "Training jobs checkpoint every 15 minutes" in run
    assert "scripted failures at 700 s: gen2-0000/s00" in run
    assert "restarts whole from its last checkpoint" in run
    assert "Backfill reservation off" in run
    assert "All times are simulated" in run
    for raw in ("checkpoint_interval_s", "failure_policy", "idle_power_kw", "True", "False"):
        assert raw not in run.split(" Plots ")[0]
    assert "simulated time since the trace's first submission" not in run  # that is the axes'
