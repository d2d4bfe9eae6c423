"""Replay with tenant queues: the `tenant` column, --queues, and the per-tenant figures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.tenants import TenantLedger
from ultraplane.simulator.traces import TraceJob

from ultraplane.cli import main
from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.quotas import QueueSpec

GEN2 = "trn3-gen2"


def simulate(*args: str) -> Result:
    return CliRunner().invoke(main, ["simulate", *args])


def trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submission_time,duration,num_gpu,tenant\n" + "\n".join(rows) + "\n")
    return path


def test_equal_shares_by_default_and_tenant_figures_in_the_outputs(tmp_path: Path) -> None:
    # 2 UltraServers; tenant a fills the fleet at t=0 (borrowing b's idle share), b arrives at
    # t=100 with one UltraServer's worth: it reclaims a whole UltraServer and starts at once.
    path = trace(tmp_path, ["a1,0,10000,36,a", "a2,0,10000,36,a", "b1,100,5000,36,b"])
    got = simulate("--fleet", f"{GEN2}:2", "--trace", str(path), "--chips-per-gpu", "4",
                   "--out", str(tmp_path / "out"), "--policy", "ultraplane", "--no-progress")
    assert got.exit_code == 0, got.output
    s = json.loads((tmp_path / "out/summary.json").read_text())["ultraplane"]
    assert s["tenants"]["a"]["nominal_chips"] == 144 == s["tenants"]["b"]["nominal_chips"]
    rows = {r["job_id"]: r for r in csv.DictReader((tmp_path / "out/jobs.csv").open())}
    assert rows["b1"]["tenant"] == "b" and float(rows["b1"]["start_s"]) == 100
    assert s["guarantee_p99_s"] == 0.0  # b was never kept out of its own share
    assert s["tenants"]["a"]["chip_hours_lost_to_reclaim"] > 0
    assert 0 < s["reclaim_lost_fraction"] < 0.1
    assert s["tenants"]["a"]["chips_borrowed_mean"] > 0
    assert (tmp_path / "out/tenants_ultraplane.png").stat().st_size > 0
    page = (tmp_path / "out/report.html").read_text()
    assert "kept out of own nominal quota" in page and "tenant b" in page


def test_queues_file_and_its_errors(tmp_path: Path) -> None:
    path = trace(tmp_path, ["a1,0,1000,36,a", "b1,0,1000,36,b"])
    queues = tmp_path / "q.yaml"
    queues.write_text("- {name: a, nominal: {trn3-gen2: 144}, cohort: org}\n"
                      "- {name: b, nominal: {trn3-gen2: 144}, cohort: org, weight: 2}\n")
    got = simulate("--fleet", f"{GEN2}:2", "--trace", str(path), "--out", str(tmp_path / "o"),
                   "--queues", str(queues), "--policy", "ultraplane", "--chips-per-gpu", "4")
    assert got.exit_code == 0, got.output
    s = json.loads((tmp_path / "o/summary.json").read_text())["ultraplane"]
    assert s["tenants"]["b"]["weight"] == 2.0
    for bad, says in (("- {name: a}\n", "nominal"),
                      ("- {name: a, nominal: {trn3-gen2: 1}, colour: x}\n", "colour"),
                      ("[", "YAML"), ("- {name: a, nominal: {trn3-gen2: 144}}\n", "b"),
                      # the simulator's old format: a clear sentence, not a traceback
                      ("- {name: a, nominal: 144}\n", "nominal must map each hardware profile")):
        queues.write_text(bad)
        got = simulate("--fleet", f"{GEN2}:2", "--trace", str(path), "--out",
                       str(tmp_path / "o"), "--queues", str(queues))
        assert got.exit_code == 2 and says in got.output and "--queues" in got.output, got.output


def test_partitioned_queues_never_borrow_and_shared_ignores_quotas() -> None:
    # one tenant, nominal one UltraServer of two: without a cohort it never runs two at once
    jobs = [TraceJob(f"j{i}", 0.0, 1000.0, 36, tenant="a") for i in range(2)]
    alone = (QueueSpec("a", {GEN2: 144}), QueueSpec("b", {GEN2: 144}))
    r = Replay(build_fleet(GEN2, 2), jobs, ReplayConfig(chips_per_gpu=4, queues=alone)).run()
    starts = sorted(x.start_s or 0.0 for x in r.records)
    assert starts[0] == 0.0 and starts[1] >= 1000.0
    shared = ReplayConfig(chips_per_gpu=4, queues=alone, enforce_quotas=False)
    r = Replay(build_fleet(GEN2, 2), jobs, shared).run()
    assert [x.start_s for x in r.records] == [0.0, 0.0]
    assert r.tenants is not None and r.tenants.fleet()["reclaim_lost_fraction"] == 0.0


def test_max_min_fairness_counts_held_chips_against_fair_shares_while_contended() -> None:
    # fleet 288 chips, quotas 144 each. 0-100: a holds all 288, b waits for 144 (fair 144
    # each: a at 2x, b at 0 -> Jain 0.5, b short by half the fleet). 100-300: each holds 144
    # and a waits for 144 more (Jain 1). 300-400: only a wants chips: not counted.
    ledger = TenantLedger((QueueSpec("a", {GEN2: 144}, cohort="o"),
                           QueueSpec("b", {GEN2: 144}, cohort="o")), 0.0, sample_s=1000.0,
                          fleet_chips=288)
    ledger.hold("a", 288)
    ledger.wait("b1", "b", 144)
    ledger.advance(100.0)
    ledger.release("a", 144)
    ledger.wait("a2", "a", 144)
    ledger.unwait("b1")
    ledger.hold("b", 144)
    ledger.advance(300.0)
    ledger.release("b", 144)
    f = ledger.close(400.0, ())
    got = f.fleet()
    assert f.contended_s == 300.0
    assert f.fair_cs["b"] == pytest.approx(144 * 300)  # held 0, then 144 for 200 s
    assert f.held_contended_cs["b"] / f.fair_cs["b"] == pytest.approx(2 / 3)
    assert got["fair_share_maxmin_jain"] == pytest.approx((0.5 * 100 + 1.0 * 200) / 300)
    assert got["fair_share_shortfall"] == pytest.approx(0.5 * 100 / 300)
    assert got["fairness_preempted_fraction"] == 0.0
    assert "borrowed_chip_time_jain" in got and "fair_share_jain" not in got
