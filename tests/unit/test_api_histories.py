"""The samples an InferenceJob's history keeps, and the serving gauges `/metrics` exports.

A job's status as the operator writes it once model servers report load (`status.load`),
and as the embedded fleet writes it (no load): what is reported is kept, what is not is
null and never exported as a zero."""

from __future__ import annotations

from prometheus_client import generate_latest
from ultraplane.api.backends.histories import InferenceHistories, objective_ms, sample_of
from ultraplane.api.metrics import Metrics

LOADED = {"phase": "Running", "replicas": 3, "readyReplicas": 2, "desiredReplicas": 4,
          "load": {"requestsPerSecond": 1240.0, "ttftP99Ms": 610.0, "tpotP99Ms": 31.0}}
SPEC = {"replicas": 3, "autoscaling": {"minReplicas": 1, "maxReplicas": 8,
                                       "objective": {"timeToFirstTokenMs": 1000,
                                                     "timePerOutputTokenMs": 50}}}


def test_a_sample_reads_the_observed_load_and_the_replicas() -> None:
    assert sample_of(LOADED, SPEC) == {"requestsPerSecond": 1240.0, "desiredReplicas": 4,
                                       "replicas": 3, "readyReplicas": 2, "ttftP99Ms": 610.0}
    # no load reported, no pods reporting readiness, no desired count written yet
    assert sample_of({"replicas": 2}, {"replicas": 5}) == {
        "requestsPerSecond": None, "desiredReplicas": 5, "replicas": 2, "readyReplicas": 2,
        "ttftP99Ms": None}


def test_the_objective_is_the_autoscaling_one_else_the_latency_slo() -> None:
    assert objective_ms(SPEC) == 1000.0
    assert objective_ms({"latencySLO": {"timeToFirstTokenMs": 250}}) == 250.0
    assert objective_ms({"replicas": 1}) is None


def test_only_jobs_that_serve_are_sampled_and_a_changed_figure_is_sampled_at_once() -> None:
    histories = InferenceHistories(every_s=5.0)
    jobs = [{"metadata": {"uid": "u1", "namespace": "serving", "name": "chat"},
             "spec": SPEC, "status": LOADED},
            {"metadata": {"uid": "u2", "namespace": "serving", "name": "waits"},
             "spec": SPEC, "status": {"phase": "Pending"}}]
    rows = histories.observe_jobs(100.0, jobs)
    assert [r["name"] for r in rows] == ["chat"] and rows[0]["ttftObjectiveMs"] == 1000.0
    assert histories.series("u2") == []
    histories.observe("u1", 101.0, LOADED, SPEC)  # unchanged and within 5 s: not kept
    histories.observe("u1", 102.0, {**LOADED, "readyReplicas": 3}, SPEC)  # changed: kept
    histories.observe("u1", 107.5, {**LOADED, "readyReplicas": 3}, SPEC)  # 5 s on: kept
    assert [(s["t"], s["readyReplicas"]) for s in histories.series("u1")] == [
        (100.0, 2), (102.0, 3), (107.5, 3)]


def test_series_are_bounded_in_samples_and_in_jobs() -> None:
    histories = InferenceHistories(samples=4, jobs=2, every_s=1.0)
    for t in range(10):
        histories.observe("a", float(t), {"replicas": t}, {})
    assert [s["t"] for s in histories.series("a")] == [6.0, 7.0, 8.0, 9.0]
    histories.observe("b", 0.0, {}, {})
    histories.observe("c", 0.0, {}, {})  # a third job: the least recently sampled goes
    assert histories.series("a") == [] and histories.series("c")


def test_gauges_export_what_is_reported_in_prometheus_units() -> None:
    metrics = Metrics()
    histories = InferenceHistories()
    quiet = {"metadata": {"uid": "u2", "namespace": "serving", "name": "quiet"},
             "spec": {"replicas": 1}, "status": {"phase": "Running", "replicas": 1}}
    rows = histories.observe_jobs(0.0, [
        {"metadata": {"uid": "u1", "namespace": "serving", "name": "chat"}, "spec": SPEC,
         "status": LOADED}, quiet])
    metrics.watch_fleet(lambda: {"inference": rows})
    text = generate_latest(metrics.registry).decode()
    chat, quiet_job = 'name="chat",namespace="serving"', 'name="quiet",namespace="serving"'
    assert f'ultraplane_inferencejob_replicas{{{chat},state="desired"}} 4.0' in text
    assert f'ultraplane_inferencejob_replicas{{{chat},state="ready"}} 2.0' in text
    assert f"ultraplane_inferencejob_requests_per_second{{{chat}}} 1240.0" in text
    assert f"ultraplane_inferencejob_ttft_p99_seconds{{{chat}}} 0.61" in text
    assert f"ultraplane_inferencejob_ttft_objective_seconds{{{chat}}} 1.0" in text
    assert f'ultraplane_inferencejob_replicas{{{quiet_job},state="ready"}} 1.0' in text
    for name in ("requests_per_second", "ttft_p99_seconds", "ttft_objective_seconds"):
        assert f"ultraplane_inferencejob_{name}{{{quiet_job}}}" not in text
