"""Inference services in the replay: the services file, the request windows, replicas that
follow a step of load through the one cycle (preempting training for a scale-up), the HPA
policy's sync, and the figures summary.json gains.

The small fleet is one Trn3 Gen2 UltraServer (144 chips = nine 16-chip replicas):

    us0 [s0 s1 . . . . . . .]  [t t t t t t]      the service's 2 replicas, training's 96 chips
    us0 [s0 s1 s2 s3 s4 s5 s6 . .] (t preempted)  after the load steps up
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ultraplane.simulator.inferenceruns import (
    inference_summary,
    replay_services,
    service_window,
    training_chip_hours,
)
from ultraplane.simulator.replay import ReplayConfig
from ultraplane.simulator.requestwindows import load_requests, windows_of
from ultraplane.simulator.servicefiles import ServiceSpec, load_services
from ultraplane.simulator.services import WINDOW_S, Service
from ultraplane.simulator.traces import TraceJob

from ultraplane.hardware.topology import build_fleet

FIGURES = {"requests", "slo_attainment", "ttft_p99_ms", "tpot_p99_ms", "output_tokens",
           "energy_kwh", "output_tokens_per_kwh", "replica_hours", "scale_up_wait_p99_s"}


def requests_csv(tmp_path: Path, gaps: list[tuple[float, float]], prompt: int = 2000,
                 output: int = 30) -> Path:
    """A request trace: for each (seconds, gap) a stretch of one request every `gap`."""
    rows, t = [], 0.0
    for seconds, gap in gaps:
        end = t + seconds
        while t < end - 1e-9:
            rows.append(f"{t:.3f},{prompt},{output}")
            t += gap
    p = tmp_path / "requests.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return p


def spec(trace: Path, **over: Any) -> ServiceSpec:
    doc: dict[str, Any] = {
        "name": "code", "model": "llama-3-70b", "chipsPerReplica": 16, "precision": "FP8",
        "priority": 100, "durationSeconds": 1800,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 9, "scaleDownDelaySeconds": 300,
                        "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}},
        "requests": {"trace": str(trace), "rateScale": 100, "loop": False},
    }
    doc.update(over)
    return ServiceSpec.model_validate(doc)


# -- the services file --------------------------------------------------------------------
GOOD = """\
- name: code
  model: llama-3-70b
  chipsPerReplica: 16
  precision: FP8
  autoscaling:
    minReplicas: 1
    maxReplicas: 8
    objective: {timeToFirstTokenMs: 1000, timePerOutputTokenMs: 50}
  durationSeconds: 3600
  requests: {trace: requests.csv, rateScale: 3, loop: true}
"""


def test_a_services_file_reads_like_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    (s,) = load_services(tmp_path / "s.yaml")
    assert (s.name, s.chips_per_replica, s.requests.rate_scale, s.priority) == ("code", 16, 3, 100)
    assert s.autoscaling is not None and s.autoscaling.max_replicas == 8
    assert s.requests.trace == str(tmp_path / "requests.csv")  # relative to the file
    (tmp_path / "t.yaml").write_text("services:\n" + "".join(f"  {x}\n" for x in
                                                               GOOD.splitlines()))
    assert load_services(tmp_path / "t.yaml")[0].name == "code"


@pytest.mark.parametrize(("change", "words"), [
    (("model: llama-3-70b", "model: gpt-9"), "unknown model 'gpt-9'"),
    (("  autoscaling:\n", "  nothing: 1\n"), "nothing"),
    (("chipsPerReplica: 16", "chipsPerReplica: 0"), "chipsPerReplica"),
    (("minReplicas: 1", "minReplicas: 9"), "minReplicas must be at most maxReplicas"),
    (("rateScale: 3", "rateScale: -1"), "rateScale"),
    (("durationSeconds: 3600", "durationSeconds: soon"), "durationSeconds"),
    (("- name: code", "- name: Code!"), "name"),
])
def test_a_bad_services_file_is_one_sentence_naming_the_field(
        tmp_path: Path, change: tuple[str, str], words: str) -> None:
    text = GOOD.replace(*change)
    if change[0] == "  autoscaling:\n":  # neither replicas nor autoscaling
        text = GOOD.split("  autoscaling:")[0] + "  durationSeconds: 3600\n" \
            "  requests: {trace: r.csv}\n"
        words = "give replicas (fixed) or autoscaling"
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ValueError, match=r"^service '") as err:
        load_services(tmp_path / "s.yaml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_services_file_must_be_a_list_of_distinct_services(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("name: code\n")
    with pytest.raises(ValueError, match="non-empty list"):
        load_services(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text(GOOD + GOOD.replace("- name", "\n- name", 1))
    with pytest.raises(ValueError, match="names service\\(s\\) twice: code"):
        load_services(tmp_path / "s.yaml")
    with pytest.raises(ValueError, match="cannot read"):
        load_services(tmp_path / "missing.yaml")


# -- request windows ---------------------------------------------------------------------
@pytest.mark.parametrize(("loop", "loops"), [(True, 3), (False, 1)])
def test_windows_hold_rows_times_loops_times_rate_scale(tmp_path: Path, loop: bool,
                                                        loops: int) -> None:
    # ten requests at 0..9 s: the trace spans 10 s, so it loops every minute
    trace = load_requests(str(requests_csv(tmp_path, [(10.0, 1.0)])))
    w = windows_of(trace, window_s=15.0, rate_scale=7.0, loop=loop, duration_s=180.0)
    assert len(w) == 12
    assert w.requests.sum() == pytest.approx(10 * loops * 7.0)
    assert np.all(w.mean_output[w.requests > 0] == 30)
    assert len(w.mixes) == 1  # every loop's minute is the same minute: one mix


def test_a_bad_request_trace_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,10,5\n2.0,ten,5\n")
    with pytest.raises(ValueError, match=":3: expected a timestamp"):
        load_requests(str(p))
    p.write_text("TIMESTAMP,Prompt\n1.0,10\n")
    with pytest.raises(ValueError, match="missing column"):
        load_requests(str(p))


# -- a replay where the load steps up -----------------------------------------------------
def training(chips_per_gpu: int = 4) -> list[TraceJob]:
    return [TraceJob("t", 0.0, 100_000.0, 96 // chips_per_gpu)]


def test_replicas_follow_a_step_of_load_and_preempt_training_for_it(tmp_path: Path) -> None:
    # 10 minutes at 50 req/s, then 10 at 250 req/s (rateScale 100)
    trace = requests_csv(tmp_path, [(600.0, 2.0), (600.0, 0.4)])
    s = spec(trace, durationSeconds=1200)
    (r,) = replay_services(build_fleet("trn3-gen2", 1), training(), [s],
                           ReplayConfig(chips_per_gpu=4, checkpoint_interval_s=60.0),
                           policies=("ultraplane",), stop_at_end=True)
    (service,) = r.services
    f = service.figures
    before = max(f.held[: int(540 / WINDOW_S)])
    after = f.held[-1]
    assert before <= 2 and after >= 2 * before + 1  # the replicas followed the load up
    # the scale-up took training's chips, and the victim says why
    (victim, by, at, reason) = r.preemptions[0]
    assert (victim, by) == ("t", "code") and 600 <= at < 700
    assert reason.startswith("Preempted by higher-priority job code, scaling up to ")
    assert reason.endswith(" replicas; requeued.")
    # each added replica served a start-up after it was placed (placed at once here)
    assert f.waits_s and max(f.waits_s) == pytest.approx(service.replica.startup_s, abs=1e-6)
    summary = inference_summary([r], *service_window(0.0, [s]))
    got = summary["inference"]["code"]["ultraplane"]
    assert set(got) >= FIGURES
    assert got["requests"] == pytest.approx(600 * 50 + 600 * 250)
    # the requests of the step's first start-up time miss, and the queue they left drains
    assert 0.6 < got["slo_attainment"] < 0.95
    assert all(p is not None and p <= 1000 for p in f.ttft_p99_ms[-8:])
    assert got["ttft_p99_ms"] > 0 and got["tpot_p99_ms"] <= 50
    assert set(summary["training_useful_chip_hours"]) == {"ultraplane"}
    # training ran on 96 chips until it was preempted (its kept work is what it checkpointed)
    assert 0 < training_chip_hours(r, 0.0, 1200.0) <= 96 * 1200 / 3600


def test_static_peak_holds_the_peak_minutes_replicas_and_lends_nothing(tmp_path: Path) -> None:
    trace = requests_csv(tmp_path, [(600.0, 2.0), (600.0, 0.4)])
    s = spec(trace, durationSeconds=1200)
    results = replay_services(build_fleet("trn3-gen2", 1), training(), [s],
                              ReplayConfig(chips_per_gpu=4, checkpoint_interval_s=60.0),
                              stop_at_end=True)
    by = {r.policy: r for r in results}
    assert set(by) == {"ultraplane", "static-peak", "hpa"}
    peak = by["static-peak"].services[0]
    ours = by["ultraplane"].services[0].figures
    assert set(peak.figures.held) == {peak.static} and peak.static > 2 * ours.held[0]
    assert ours.replica_s < peak.figures.replica_s  # fewer replica-hours before the step
    assert training_chip_hours(by["ultraplane"], 0, 1200) > training_chip_hours(
        by["static-peak"], 0, 1200)


def test_hpa_counts_replicas_still_starting_at_zero(tmp_path: Path) -> None:
    # HPA: desired = ceil(current x utilization / 0.7) (at most max(2 x current, current + 4)
    # a sync), the utilization averaged over every replica asked for, those not yet serving
    # at 0% (as the HPA counts pods not yet ready when it scales up)
    trace = requests_csv(tmp_path, [(600.0, 0.4)])
    for asked in (1, 4):
        s = Service(spec(trace), "hpa", "trn3-gen2", 0.0)
        s.placed(0, {"us0": 16}, 0.0, warm=True)
        s.serve_window(WINDOW_S)
        assert s.util > 1.0  # one replica for 250 req/s is overloaded
        usage = s.util * 1 / asked
        assert s.decide(WINDOW_S, asked) == min(math.ceil(asked * usage / 0.7), asked + 4,
                                                max(2 * asked, asked + 4), 9)
        assert "70% target" in s.reason
