"""Trace replay under power budgets and power-down, and `ultraplane simulate`'s power flags.

Fleets are Trn3 Gen2 UltraServers (144 chips; assumed 1,000 W peak, 300 W idle, 30 W
standby, 300 s wake, 600 W lowest cap):

    gen2-0000  [144 chips]    gen2-0001  [144 chips]
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.traces import TraceJob, parse_rows

from ultraplane.cli import main
from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.powerbudgets import BudgetSpec

IDLE_US = 144 * 300.0


def trace(text: str) -> list[TraceJob]:
    jobs, bad = parse_rows(io.StringIO("job_id,submission_time,duration,num_gpu\n" + text))
    assert bad == []
    return jobs


def replay(text: str, **cfg: object):  # type: ignore[no-untyped-def]
    return Replay(build_fleet("trn3-gen2", 2), trace(text), ReplayConfig(**cfg)).run()  # type: ignore[arg-type]


def test_two_jobs_run_capped_within_the_budget_and_slower() -> None:
    # both fit at the 600 W floor, not uncapped: both run, capped, and end later than 1,030 s
    budget = BudgetSpec("fleet", 2 * IDLE_US + 120e3)
    free = {r.job_id: r for r in replay("a,0,1000,144\nb,0,1000,144\n").records}
    r = replay("a,0,1000,144\nb,0,1000,144\n", power_budgets=(budget,))
    got = {x.job_id: x for x in r.records}
    assert free["a"].end_s == 1030
    assert got["a"].start_s == got["b"].start_s == 0
    assert got["a"].end_s is not None and got["a"].end_s > 1030
    assert r.power is not None
    assert r.power.seconds_over_budget == 0.0
    assert r.power.capped_chip_s > 0
    assert r.peak_power_w <= budget.watts + 1e-6


def test_without_capping_the_second_job_waits_for_headroom() -> None:
    budget = BudgetSpec("fleet", 2 * IDLE_US + 100e3)
    got = {x.job_id: x for x in replay("a,0,1000,144\nb,0,1000,144\n", power_budgets=(budget,),
                                       power_capping=False).records}
    assert got["a"].end_s == 1030 and got["b"].start_s == 1030


def test_idle_ultraservers_power_down_and_a_woken_one_starts_after_the_wake() -> None:
    # a ends at 1,030 s; both UltraServers are down by 1,130 s; b (t=5,000 s) wakes one
    text = "a,0,1000,144\nb,5000,100,144\n"
    on = replay(text)
    down = replay(text, idle_power_down_s=100.0)
    got = {x.job_id: x for x in down.records}
    assert got["b"].start_s == 5000 and got["b"].end_s == pytest.approx(5000 + 300 + 100)
    assert down.power is not None and down.power.wakes == 1
    assert down.energy_kwh < on.energy_kwh


def test_no_budget_and_no_power_down_is_todays_replay() -> None:
    text = "a,0,1000,144\nb,0,500,72\nc,10,700,36\n"
    assert [(x.start_s, x.end_s) for x in replay(text).records] == [
        (x.start_s, x.end_s) for x in replay(text, power_budgets=()).records]
    assert replay(text).power is None


def test_simulate_writes_power_csv_and_the_summary_keys(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submission_time,duration,num_gpu\na,0,1000,144\nb,0,1000,144\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["simulate", "--fleet", "trn3-gen2:2", "--trace", str(jobs),
                                    "--out", str(out), "--policy", "ultraplane",
                                    "--power-budget", "50%", "--idle-power-down", "600",
                                    "--no-progress"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    # the same run replays provision-for-peak: the one UltraServer 50% of peak holds at peak
    assert summary["provision-for-peak"]["fleet_chips"] == 144
    assert summary["provision-for-peak"]["jobs_completed"] == 2
    s = summary["ultraplane"]
    assert s["power_budget_w"] == pytest.approx(0.5 * 288 * 1000)
    assert s["seconds_over_budget"] == 0.0
    for key in ("energy_kwh_idle", "energy_kwh_active", "energy_per_useful_chip_hour_kwh",
                "capped_chip_hours", "tokens_per_megawatt"):
        assert key in s
    assert s["energy_kwh_idle"] + s["energy_kwh_active"] == pytest.approx(s["energy_kwh"])
    rows = list(csv.reader((out / "power.csv").open()))
    assert rows[0] == ["t_s", "fleet_w", "budget_fleet_w"]
    assert all(float(r[2]) <= 0.5 * 288 * 1000 + 1e-6 for r in rows[1:])


@pytest.mark.parametrize("value", ["lots", "-5", "0%", "nope.yaml"])
def test_a_bad_power_budget_exits_2_with_one_sentence(tmp_path: Path, value: str) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,submission_time,duration,num_gpu\na,0,100,8\n")
    res = CliRunner().invoke(main, ["simulate", "--fleet", "trn3-gen2:1", "--trace", str(jobs),
                                    "--out", str(tmp_path / "o"), "--power-budget", value])
    assert res.exit_code == 2, res.output
    assert "--power-budget" in res.output and "Traceback" not in res.output
