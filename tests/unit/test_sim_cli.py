"""`ultraplane simulate`: outputs, bad input (exit 2 naming the field), bad rows by line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ultraplane.cli import main

SUMMARY_KEYS = {
    "jobs_submitted", "jobs_completed", "jct_mean_s", "jct_p50_s", "jct_p99_s", "queue_delay_mean_s",
    "queue_delay_p99_s", "utilization", "energy_kwh", "avg_power_kw", "peak_power_kw",
    "large_jobs_queue_delay_mean_s",
}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "jobs.csv"
    p.write_text("job_id,submission_time,duration,num_gpu\n" + text)
    return p


def run(*args: str) -> object:
    return CliRunner().invoke(main, ["simulate", *args])


def test_outputs_for_both_policies(tmp_path: Path) -> None:
    trace = write(tmp_path, "a,0,1000,64\nb,10,500,8\nc,20,100,4\nhuge,30,100,9999\n")
    out = tmp_path / "out"
    res = run("--fleet", "trn3-gen2:2", "--trace", str(trace), "--out", str(out), "--no-progress")
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"ultraplane", "first-fit"}
    for s in summary.values():
        assert set(s) >= SUMMARY_KEYS
        assert (s["jobs_submitted"], s["jobs_completed"], s["jobs_rejected"]) == (4, 3, 1)
        assert 0 < s["utilization"] <= 1 and s["peak_power_kw"] > s["avg_power_kw"] > 0
    with (out / "jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["job_id", "policy", "submit_s", "start_s", "end_s", "chips",
                             "ultraservers", "energy_kwh", "tenant", "moves"]
    assert {(r["job_id"], r["policy"]) for r in rows} >= {("a", "ultraplane"), ("a", "first-fit")}
    a = next(r for r in rows if r["job_id"] == "a")
    assert (a["start_s"], a["end_s"], a["chips"]) == ("0", "1030", "64")
    lines = [json.loads(x) for x in (out / "placements.jsonl").read_text().splitlines()]
    assert {tuple(sorted(x)) for x in lines} == {("chips", "event", "job_id", "policy", "t_s")}
    assert sum(x["event"] == "start" for x in lines) == sum(x["event"] == "end" for x in lines) == 6
    for name in ("utilization.png", "power.png", "heatmap_ultraplane.png",
                 "heatmap_first-fit.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # no job ever waited: the queue plot would be a flat zero, so a sentence stands instead
    assert not (out / "queue.png").exists()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4
    assert "No job ever waited in the queue" in html


def test_one_policy_and_chips_per_gpu(tmp_path: Path) -> None:
    trace = write(tmp_path, "a,0,100,8\n")
    out = tmp_path / "o"
    res = run("--fleet", "trn3-gen2:1", "--trace", str(trace), "--out", str(out), "--policy",
              "first-fit", "--chips-per-gpu", "4", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "chips_per_gpu" in json.loads((out / "summary.json").read_text())["first-fit"]
    assert "32" in (out / "jobs.csv").read_text().splitlines()[1].split(",")


def test_bad_rows_exit_2_with_line_numbers(tmp_path: Path) -> None:
    trace = write(tmp_path, "a,0,100,8\nb,zero,100,8\nc,0,100,-1\n")
    res = run("--fleet", "trn3-gen2:1", "--trace", str(trace), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2
    assert ":3: submission_time" in res.output and ":4: num_gpu" in res.output
    assert not (tmp_path / "o").exists()


def test_skip_bad_rows_still_reports_them(tmp_path: Path) -> None:
    trace = write(tmp_path, "a,0,100,8\nb,zero,100,8\n")
    out = tmp_path / "o"
    res = run("--fleet", "trn3-gen2:1", "--trace", str(trace), "--out", str(out), "--skip-bad-rows",
              "--no-progress")
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())["ultraplane"]
    assert s["jobs_submitted"] == 1 and len(s["bad_rows"]) == 1 and ":3:" in s["bad_rows"][0]



def test_a_precision_the_fleets_chip_lacks_is_a_bad_row_not_a_traceback(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu,kind,priority,topology,model,precision\n"
                     "a,0,100,1,training,0,,70b,BF16\nb,5,100,1,training,0,,70b,MXFP8\n")
    res = run("--fleet", "trn2:1", "--trace", str(trace), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit | None)
    assert ":3: precision MXFP8 is not supported by trn2" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()
    out = tmp_path / "skipped"
    res = run("--fleet", "trn2:1", "--trace", str(trace), "--out", str(out), "--skip-bad-rows",
              "--no-progress")
    assert res.exit_code == 0, res.output
    assert json.loads((out / "summary.json").read_text())["ultraplane"]["jobs_submitted"] == 1

@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--fleet", "trn9:4"], "--fleet"),
        (["--fleet", "trn3-gen2"], "--fleet"),
        (["--fleet", "trn3-gen2:1", "--policy", "random"], "--policy"),
        (["--fleet", "trn3-gen2:1", "--chips-per-gpu", "0"], "--chips-per-gpu"),
        (["--fleet", "trn3-gen2:1", "--fail", "x:gen2-0000"], "--fail"),
        (["--fleet", "trn3-gen2:1", "--queue-stretch", "-1"], "--queue-stretch"),
        (["--cluster", "nope.yaml"], "--cluster"),
        ([], "--fleet"),
    ],
)
def test_bad_options_exit_2_naming_the_field(tmp_path: Path, args: list[str], field: str) -> None:
    trace = write(tmp_path, "a,0,100,8\n")
    res = run(*args, "--trace", str(trace), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2, res.output
    assert field in res.output and "Traceback" not in res.output


def test_queue_stretch_orders_the_queue_and_the_summary_says_which_order(tmp_path: Path) -> None:
    # one UltraServer: 'keep' holds 84 chips, 'hog' the other 60; 'long' (10 h) arrived before
    # 'short' (10 min), both of 60 chips
    trace = write(tmp_path, "keep,0,1000000,84\nhog,0,1000,60\nlong,10,36000,60\nshort,20,600,60\n")
    starts = {}
    for stretch in ("10", "0"):
        out = tmp_path / stretch
        res = run("--fleet", "trn3-gen2:1", "--trace", str(trace), "--out", str(out),
                  "--policy", "ultraplane", "--queue-stretch", stretch, "--no-progress")
        assert res.exit_code == 0, res.output
        summary = json.loads((out / "summary.json").read_text())["ultraplane"]
        assert summary["queue_order"].startswith("target start" if stretch == "10" else "arrival")
        with (out / "jobs.csv").open() as f:
            starts[stretch] = {r["job_id"]: float(r["start_s"]) for r in csv.DictReader(f)}
    assert starts["10"]["short"] < starts["10"]["long"]
    assert starts["0"]["long"] < starts["0"]["short"]


def test_cluster_file_instead_of_fleet(tmp_path: Path) -> None:
    from ultraplane.hardware.clusterfiles import load_cluster_file

    cluster = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "cluster.yaml"
    trace = write(tmp_path, "a,0,100,8\n")
    out = tmp_path / "o"
    res = run("--cluster", str(cluster), "--trace", str(trace), "--out", str(out), "--no-progress",
              "--policy", "ultraplane")
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())["ultraplane"]
    loaded = load_cluster_file(str(cluster))
    assert s["fleet_chips"] == loaded.topology.chip_count
    assert s["jobs_completed"] == 1 and s["held_allocations"] == len(loaded.allocations) > 0
    held = {c for chips in loaded.allocations.values() for c in chips}
    starts = [json.loads(x) for x in (out / "placements.jsonl").read_text().splitlines()]
    assert not held & set(starts[0]["chips"])  # the file's allocations stay busy
    # held chips count as allocated, not as useful work of the trace
    assert s["allocated_utilization"] > 0.9 * len(held) / loaded.topology.chip_count
    assert s["useful_utilization"] < s["allocated_utilization"]


@pytest.mark.parametrize(("policy", "failed", "completed"), [("Fail", 1, 1), ("RestartAll", 0, 2)])
def test_scripted_server_failure_from_the_command_line(tmp_path: Path, policy: str, failed: int,
                                                       completed: int) -> None:
    # one UltraServer: 'big' holds all 144 chips when server s00 fails at t=700
    trace = write(tmp_path, "big,0,1000,144\nafter,10,100,4\n")
    out = tmp_path / "o"
    res = run("--fleet", "trn3-gen2:1", "--trace", str(trace), "--out", str(out), "--no-progress",
              "--policy", "ultraplane", "--failure-policy", policy, "--fail", "700:gen2-0000/s00")
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())["ultraplane"]
    assert (s["jobs_failed"], s["jobs_completed"]) == (failed, completed)


def test_every_run_reports_against_the_fluid_bound_and_the_in_domain_greedy(tmp_path: Path) -> None:
    # two UltraServers; a: 200 chips (one whole + 56), b: 100 chips arriving while a runs.
    # The greedy baseline has no overheads: a ends at 1000 s there, at 1030 s here (one
    # checkpoint), so ultraplane's JCT ratio is above 1 and its useful utilization below.
    trace = write(tmp_path, "a,0,1000,200\nb,10,1000,100\n")
    out = tmp_path / "out"
    res = run("--fleet", "trn3-gen2:2", "--trace", str(trace), "--out", str(out), "--no-progress",
              "--policy", "ultraplane")
    assert res.exit_code == 0, res.output
    assert "vs greedy in one domain: JCT mean x" in res.output
    assert "large jobs: 144 chips or more (one trn3-gen2 UltraServer)" in res.output
    s = json.loads((out / "summary.json").read_text())["ultraplane"]
    assert s["large_job_chips"] == 144 and s["large_jobs"] == 1
    assert set(s["bounds"]) == {"greedy", "fluid"}
    assert s["bounds"]["greedy"]["jobs"] == 2
    assert s["jct_mean_vs_greedy"] > 1.0 and s["useful_util_vs_greedy"] < 1.0
    assert s["useful_utilization"] < s["allocated_utilization"]
    assert s["split_jobs_that_fit_one_ultraserver"] == 0
    html = (out / "report.html").read_text()
    assert "greedy-in-domain" in html and "144 chips or more" in html


@pytest.mark.parametrize(("size", "short_first"), [(28, True), (40, False)])
def test_on_trn2_a_gang_of_more_than_half_an_ultraserver_ranks_by_submit_time(
        tmp_path: Path, size: int, short_first: bool) -> None:
    # one Trn2 UltraServer of 64 chips: 'keep' holds 24, 'hog' 40; 'long' (10 h) arrived before
    # 'short' (10 min), both of `size` chips. 40 is over half of 64 (33+), 28 is not.
    trace = write(tmp_path, f"keep,0,1000000,24\nhog,0,1000,40\nlong,10,36000,{size}\n"
                            f"short,20,600,{size}\n")
    out = tmp_path / "o"
    res = run("--fleet", "trn2:1", "--trace", str(trace), "--out", str(out),
              "--policy", "ultraplane", "--no-progress")
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())["ultraplane"]
    assert "gangs of 33+ chips" in summary["queue_order"]
    with (out / "jobs.csv").open() as f:
        starts = {r["job_id"]: float(r["start_s"]) for r in csv.DictReader(f)}
    assert (starts["short"] < starts["long"]) is short_first
