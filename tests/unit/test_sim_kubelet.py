"""The virtual kubelet's decisions on listed objects (no API server needed).

    UltraServer us-a (trn3-gen2, 36 servers x 4 chips)
      s00: c00 c01 c02 c03   <- TrainingJob ns/train (4 chips)
      s01: c00 c01 c02 c03   <- InferenceJob ns/serve (1 replica x 4 chips)
"""

from __future__ import annotations

from typing import Any

import pytest
from ultraplane.simulator.kubelets import VirtualKubelet
from ultraplane.simulator.metrics import SimulatorMetrics

CHIPS = [f"us-a/s00/c{c:02d}" for c in range(4)]


class Clock:
    t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def us(failed: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "us-a"}, "spec": {"profile": "trn3-gen2", "network": ["block-0"],
                                                   "failedChips": failed or []}}


def train(phase: str = "Admitted", attempt: int = 1, chips: list[str] = CHIPS, **status: Any) -> dict[str, Any]:
    return {"kind": "TrainingJob", "metadata": {"namespace": "ns", "name": "train"},
            "spec": {"chips": 4, "work": {"durationSeconds": 1000}, "failurePolicy": "RestartAll"},
            "status": {"phase": phase, "attempt": attempt, "allocation": {"chips": chips}, **status}}


def serve() -> dict[str, Any]:
    return {"kind": "InferenceJob", "metadata": {"namespace": "ns", "name": "serve"},
            "spec": {"replicas": 1, "chipsPerReplica": 4, "model": {"name": "m", "parametersBillions": 8},
                     "load": {"tokensPerSecond": 500}, "precision": "MXFP8"},
            "status": {"phase": "Admitted", "attempt": 1,
                       "allocation": {"replicas": [{"index": 0, "chips": [f"us-a/s01/c{c:02d}" for c in range(4)]}]}}}


def kubelet() -> tuple[VirtualKubelet, Clock]:
    clock = Clock()
    k = VirtualKubelet(clock=clock, time_scale=100.0)
    k.sync_ultraservers([us()])
    return k, clock


def by_name(patches: list) -> dict[str, dict[str, Any]]:
    return {p.name: p.body["status"] for p in patches}


def test_admitted_job_runs_then_succeeds_with_energy() -> None:
    k, clock = kubelet()
    assert k.sync_jobs([train(), serve()]) == []
    clock.t += 5  # 500 simulated seconds
    st = by_name(k.tick())
    assert st["train"]["phase"] == "Running" and st["train"]["progress"]["completedSteps"] == 500
    assert st["train"]["energyKWh"] > 0 and "allocation" not in st["train"] and "attempt" not in st["train"]
    assert st["serve"]["tokensPerSecond"] == pytest.approx(500) and st["serve"]["sloMet"] is True
    chips = st["us-a"]["chips"]
    assert chips[0] == {"id": "s00/c00", "job": "tj/ns/train", "utilization": pytest.approx(0.9, abs=0.01),
                        "powerWatts": pytest.approx(300 + 700 * 0.9 * 0.95, abs=1), "failed": False}
    assert chips[10]["job"] is None and chips[10]["powerWatts"] == 300.0
    assert set(st["us-a"]) == {"chips", "utilization", "powerWatts", "energyKWh", "heartbeatTime"}
    k.sync_jobs([train("Running"), serve()])
    clock.t += 10
    st = by_name(k.tick())
    assert st["train"]["phase"] == "Succeeded" and st["train"]["progressPercent"] == 100
    assert st["train"]["completionTime"] and st["train"]["energyKWh"] > 0
    assert "train" not in by_name(k.tick())  # the final status is sent once


def test_conditions_keep_the_operators_and_guard_with_resource_version() -> None:
    k, clock = kubelet()
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "placed",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}
    body = train(conditions=[admitted])
    body["metadata"]["resourceVersion"] = "42"
    k.sync_jobs([body])
    clock.t += 1
    [p] = [p for p in k.tick() if p.name == "train"]
    assert p.body["metadata"] == {"resourceVersion": "42"}
    conds = {c["type"]: c for c in p.body["status"]["conditions"]}
    assert conds["Admitted"] == admitted
    assert (conds["Running"]["status"], conds["Finished"]["status"]) == ("True", "False")
    clock.t += 20
    [p] = [p for p in k.tick() if p.name == "train"]
    conds = {c["type"]: c for c in p.body["status"]["conditions"]}
    assert (conds["Running"]["status"], conds["Finished"]["status"]) == ("False", "True")
    assert conds["Finished"]["reason"] == "Succeeded"


def test_preempted_job_stops_and_resumes_from_checkpoint_on_new_attempt() -> None:
    k, clock = kubelet()
    k.sync_jobs([train()])
    clock.t += 7  # 700 s: checkpoint at 600
    k.tick()
    k.sync_jobs([train("Preempted")])
    assert "tj/ns/train" not in k.runtime
    other = [f"us-a/s05/c{c:02d}" for c in range(4)]
    k.sync_jobs([train("Admitted", attempt=2, chips=other, progress={"checkpointedSteps": 600})])
    clock.t += 0.5
    st = by_name(k.tick())["train"]
    assert st["progress"]["completedSteps"] == 600  # still restarting (60 s cost)


def test_chip_failure_then_new_attempt_restarts_from_checkpoint() -> None:
    k, clock = kubelet()
    k.sync_jobs([train()])
    clock.t += 7
    k.sync_ultraservers([us(["s00/c02"])])
    st = by_name(k.tick())
    assert st["train"]["progress"]["completedSteps"] == 600 and st["train"]["powerWatts"] == 0
    assert st["us-a"]["chips"][2]["failed"] is True
    other = [f"us-a/s09/c{c:02d}" for c in range(4)]
    k.sync_jobs([train("Admitted", attempt=2, chips=other)])
    clock.t += 3  # 300 s: 60 s restart, then 240 steps
    assert by_name(k.tick())["train"]["progress"]["completedSteps"] == 600 + 240


def test_deleted_job_is_stopped_and_bad_spec_fails_clearly() -> None:
    k, _ = kubelet()
    k.sync_jobs([train()])
    k.sync_jobs([])
    assert k.jobs == {} and "tj/ns/train" not in k.runtime
    bad = train()
    bad["spec"]["work"] = {}
    [p] = k.sync_jobs([bad])
    assert p.body["status"]["phase"] == "Failed" and "durationSeconds" in p.body["status"]["message"]


def test_metrics_follow_the_runtime() -> None:
    k, clock = kubelet()
    m = SimulatorMetrics()
    k.sync_jobs([train()])
    clock.t += 1
    k.tick()
    m.update(k)
    get = m.registry.get_sample_value
    assert get("ultraplane_sim_jobs_running") == 1
    assert get("ultraplane_sim_fleet_power_watts") > 144 * 300
    assert get("ultraplane_sim_job_progress_percent", {"namespace": "ns", "name": "train"}) == 10
    clock.t += 20
    k.tick()
    m.update(k)
    assert get("ultraplane_sim_job_events_total", {"kind": "Succeeded"}) == 1


def test_a_training_and_an_inference_job_may_share_a_name() -> None:
    k, clock = kubelet()
    same = serve()
    same["metadata"]["name"] = "train"
    assert k.sync_jobs([train(), same]) == []
    assert {"tj/ns/train", "ij/ns/train"} <= set(k.jobs)
    clock.t += 5
    kinds = {p.kind: p.body["status"] for p in k.tick() if p.name == "train"}
    assert kinds["TrainingJob"]["phase"] == "Running" and kinds["InferenceJob"]["phase"] == "Running"
    assert "tokensPerSecond" in kinds["InferenceJob"] and "progress" in kinds["TrainingJob"]


def test_chip_hours_are_written_on_the_simulated_clock_like_energy() -> None:
    # time_scale 100: 5 wall seconds are 500 simulated seconds of 4 chips = 0.556 chip-hours
    # (the wall clock would say 0.0056), as energyKWh counts 500 simulated seconds of power.
    k, clock = kubelet()
    k.sync_jobs([train(), serve()])
    clock.t += 5
    st = by_name(k.tick())
    assert st["train"]["chipHours"] == pytest.approx(4 * 500 / 3600, rel=1e-4)
    busy_w = st["train"]["powerWatts"]
    assert st["train"]["energyKWh"] == pytest.approx(busy_w * 500 / 3.6e6, rel=1e-3)
    tps = st["serve"]["tokensPerSecond"]
    assert tps == round(tps, 1)  # shown as 500.0, not a raw float


def test_a_job_the_runtime_cannot_run_fails_through_the_one_status_builder() -> None:
    k, _ = kubelet()
    bad = train(conditions=[{"type": "Admitted", "status": "True", "reason": "Admitted",
                             "message": "placed", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    bad["spec"]["work"] = {}
    bad["metadata"]["resourceVersion"] = "7"
    [p] = k.sync_jobs([bad])
    assert p.body["metadata"] == {"resourceVersion": "7"}  # its conditions replace the list
    conds = {c["type"]: c["status"] for c in p.body["status"]["conditions"]}
    assert conds == {"Admitted": "True", "Running": "False", "Finished": "True"}
    assert p.body["status"]["completionTime"]
