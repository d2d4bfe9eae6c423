"""The report's fair-share figure and its moves: the ledger records each team's held chips
and fair share once per change, the report draws them per team, and each move of a running
job is marked on the heatmap and listed in a table."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from ultraplane.simulator.movereports import mark_moves
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.reports import write_report
from ultraplane.simulator.tenants import TenantLedger
from ultraplane.simulator.traces import TraceJob

from ultraplane.hardware.topology import build_fleet
from ultraplane.policies.fairshares import fair_shares
from ultraplane.policies.quotas import QueueSpec

matplotlib.use("Agg")
import matplotlib.pyplot as plt

GEN2 = "trn3-gen2"
LONG = 36_000.0
TITLE = "Chips held against fair share"


def test_the_fair_share_series_is_what_fairshares_gives_once_per_change() -> None:
    # fleet 288: a (weight 2) holds all of it, b (weight 1) wants 144 from t=0; at t=100 a
    # gives 144 to b; c never wants chips. Many instants change nothing.
    weight = {"a": 2.0, "b": 1.0, "c": 1.0}
    ledger = TenantLedger(tuple(QueueSpec(t, {GEN2: 96}, cohort="o", weight=w)
                                for t, w in weight.items()), 0.0, sample_s=1000.0,
                          fleet_chips=288)
    ledger.advance(0.0)
    ledger.hold("a", 288)
    ledger.wait("b1", "b", 144)
    for t in range(1, 100):
        ledger.advance(float(t))
    ledger.advance(100.0)
    ledger.release("a", 144)
    ledger.unwait("b1")
    ledger.hold("b", 144)
    for t in range(101, 300):
        ledger.advance(float(t))
    f = ledger.close(300.0, ())
    at_0 = fair_shares({"a": 288, "b": 144, "c": 0}, weight, 288)
    at_100 = fair_shares({"a": 144, "b": 144, "c": 0}, weight, 288)
    assert at_0["a"] == pytest.approx(192) and at_0["b"] == pytest.approx(96)  # by weight
    for team in weight:
        steps = f.fair[team]
        want = [(0.0, at_0[team])] + ([(100.0, at_100[team])] if at_100[team] != at_0[team] else [])
        assert list(zip(steps.t, steps.v, strict=True)) == want
    assert (f.held["a"].t, f.held["a"].v) == ([0.0, 100.0], [288, 144])
    assert (f.held["b"].t, f.held["b"].v) == ([100.0], [144])
    assert f.held["c"].t == []


def _report(tmp_path: Path, jobs: list[TraceJob], queues: tuple[QueueSpec, ...]) -> Path:
    result = Replay(build_fleet(GEN2, 2), jobs,
                    ReplayConfig(chips_per_gpu=4, queues=queues)).run()
    out = tmp_path / "out"
    write_report(out, [result], meta={})
    return out


def test_the_report_draws_held_against_fair_share_only_with_tenant_queues(tmp_path: Path) -> None:
    jobs = [TraceJob("a1", 0.0, 10_000.0, 36, tenant="a"),
            TraceJob("a2", 0.0, 10_000.0, 36, tenant="a"),
            TraceJob("b1", 100.0, 5_000.0, 36, tenant="b")]
    queues = tuple(QueueSpec(q, {GEN2: 144}, cohort="all") for q in ("a", "b"))
    out = _report(tmp_path / "queues", jobs, queues)
    assert (out / "fairshare_ultraplane.png").stat().st_size > 0
    assert TITLE in (out / "report.html").read_text()
    plain = [replace(j, tenant=None) for j in jobs]
    out = _report(tmp_path / "plain", plain, ())
    assert not (out / "fairshare_ultraplane.png").exists()
    page = (out / "report.html").read_text()
    assert TITLE not in page and 'id="move-table"' not in page


def test_a_move_is_marked_on_the_heatmap_and_listed_in_the_report(tmp_path: Path) -> None:
    # test_moves_replay's fleet: at t=1000, w (A, 88 chips) fits A's unused quota but no
    # UltraServer until b1 (B, 44 chips) moves from gen2-0001 to gen2-0000's free chips.
    jobs = [TraceJob("b2", 0.0, LONG, 25, tenant="B"), TraceJob("a0", 0.0, 500.0, 11, tenant="A"),
            TraceJob("a1", 0.0, LONG, 14, tenant="A"), TraceJob("b1", 0.0, LONG, 11, tenant="B"),
            TraceJob("w", 1000.0, LONG, 22, tenant="A")]
    queues = tuple(QueueSpec(q, {GEN2: 144}, cohort="all") for q in ("A", "B"))
    result = Replay(build_fleet(GEN2, 2), jobs,
                    ReplayConfig(chips_per_gpu=4, queues=queues)).run()
    [move] = result.move_log
    assert (move.t, move.job_id, move.by) == (1000.0, "b1", "w")
    assert move.origin == ("gen2-0001",) and move.to == ("gen2-0000",)
    assert move.lost_chip_s == pytest.approx(result.moved_lost_chip_s) and move.lost_chip_s > 0

    fig, ax = plt.subplots()
    mark_moves(ax, result, result.t0, 3600.0)
    row = {us: i for i, us in enumerate(result.ultraservers)}
    left, went = (c.get_offsets() for c in ax.collections)
    plt.close(fig)
    assert np.allclose(left, [[1000.0 / 3600, row["gen2-0001"]]])
    assert np.allclose(went, [[1000.0 / 3600, row["gen2-0000"]]])

    out = tmp_path / "out"
    write_report(out, [result], meta={})
    page = (out / "report.html").read_text()
    table = page.split('id="move-table"')[1].split("</table>")[0]
    cells = [c.strip() for c in table.replace("</td>", "<td>").split("<td>") if c.strip()]
    lost = f"{move.lost_chip_s / 3600:,.2f}"
    i = cells.index("b1")
    assert cells[i - 2:i + 5] == ["ultraplane", f"{1000 / 3600:,.2f}", "b1", "gen2-0001",
                                  "gen2-0000", "w", lost]
    assert "1 moves marked" in page
    with (out / "jobs.csv").open() as fh:
        moves = {r["job_id"]: int(r["moves"]) for r in csv.DictReader(fh)}
    assert moves == {"b2": 0, "a0": 0, "a1": 0, "b1": 1, "w": 0}
