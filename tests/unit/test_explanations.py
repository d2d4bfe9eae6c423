"""`ultraplane.documents.explanations`: what keeps a job waiting, the nearest UltraServers, its start."""

from __future__ import annotations

import pytest

from ultraplane.documents.explanation_inputs import explain_documents, job_name_of_key, waiting_job
from ultraplane.documents.explanations import (
    HIDDEN,
    Holder,
    ServerState,
    WaitingJob,
    end_from_progress,
    explain,
)

NOW = 1_000_000.0


def us(name: str, free: int, *holders: Holder, reserved_for: str | None = None,
       chips: int = 144) -> ServerState:
    return ServerState(name, "trn3-gen2", chips, free, holders=holders, reserved_for=reserved_for)


def waiting(chips: int, *, gangs: int = 1, position: int | None = 1,
            phase: str = "Pending") -> WaitingJob:
    return WaitingJob("team/big", "TrainingJob", phase, chips, gangs, "trn3-gen2", position,
                      "NoCapacity", "no room")


def test_a_full_fleet_blocks_and_the_soonest_drain_predicts_the_start() -> None:
    #   u0 [a: 100 chips, ends +1h | 44 free]   u1 [b: 144 chips, ends +2h]
    #   a 144-chip gang needs one whole UltraServer: u0 drains first, at +1h
    fleet = [us("u0", 44, Holder("team/a", 100, NOW + 3600)),
             us("u1", 0, Holder("team/b", 144, NOW + 7200))]
    got = explain(waiting(144), fleet, now_s=NOW)
    assert [b.kind for b in got.blockers] == ["NoDomainFits"]
    assert "at most 44 on one UltraServer" in got.blockers[0].message
    assert got.predicted_start_s == NOW + 3600
    assert [n.name for n in got.nearest] == ["u0", "u1"]
    assert got.nearest[0].missing == 100 and got.nearest[0].holders[0].job == "team/a"


def test_two_ultraservers_for_a_288_chip_gang_start_when_the_second_drains() -> None:
    #   u0 [ends +1h]  u1 [ends +3h]  u2 [ends never (no prediction)]
    fleet = [us("u0", 0, Holder("x/a", 144, NOW + 3600)),
             us("u1", 0, Holder("x/b", 144, NOW + 3 * 3600)),
             us("u2", 0, Holder("x/c", 144, None))]
    assert explain(waiting(288), fleet, now_s=NOW).predicted_start_s == NOW + 3 * 3600


def test_no_prediction_without_predicted_ends() -> None:
    fleet = [us("u0", 0, Holder("x/a", 144, None))]
    got = explain(waiting(144), fleet, now_s=NOW)
    assert got.predicted_start_s is None and "no prediction" in got.basis


def test_a_reservation_for_another_job_blocks_and_hides_other_namespaces() -> None:
    #   u0 [reserved for other/first, 144 free]   u1 [secret/x: 144, ends +1h]
    fleet = [us("u0", 144, reserved_for="other/first"),
             us("u1", 0, Holder("secret/x", 144, NOW + 3600))]
    got = explain(waiting(144, position=2), fleet, now_s=NOW,
                  visible=lambda ns: ns == "team")
    kinds = [b.kind for b in got.blockers]
    assert kinds == ["NoDomainFits", "Reservation", "QueueAhead"]
    assert "other/first" not in got.blockers[1].message and HIDDEN in got.blockers[1].message
    held = {n.name: n for n in got.nearest}
    assert held["u1"].holders[0].job == HIDDEN and held["u0"].reserved_for == HIDDEN
    # the reserved UltraServer is not counted for its start: u1 drains at +1h
    assert got.predicted_start_s == NOW + 3600


def test_a_running_job_waits_for_nothing() -> None:
    got = explain(waiting(4, phase="Running", position=None), [us("u0", 140)], now_s=NOW)
    assert got.blockers == () and "waits for nothing" in got.summary


def test_progress_scales_to_an_end() -> None:
    assert end_from_progress(NOW - 600, NOW, 25.0) == pytest.approx(NOW + 1800)
    assert end_from_progress(None, NOW, 25.0) is None
    assert end_from_progress(NOW - 600, NOW, 0.0) is None


def test_documents_in_the_rest_vocabulary() -> None:
    job = {"kind": "InferenceJob", "metadata": {"namespace": "serve", "name": "chat"},
           "spec": {"replicas": 2, "chipsPerReplica": 64, "profile": "trn3-gen2"},
           "status": {"phase": "Pending", "queuePosition": 3}}
    holder = {"kind": "TrainingJob", "metadata": {"namespace": "ml", "name": "run"},
              "spec": {"chips": 144, "work": {"durationSeconds": 7200}},
              "status": {"phase": "Running", "startTime": "1970-01-12T13:46:40Z",
                         "allocation": {"chips": [f"u0/s{s:02d}/c{c:02d}" for s in range(36)
                                                  for c in range(4)]}}}
    views = [{"name": "u0", "profile": "trn3-gen2", "chips": 144, "freeChips": 0,
              "failedChips": [], "schedulable": True, "reservedFor": "ij/serve/chat"},
             {"name": "u1", "profile": "trn3-gen2", "chips": 144, "freeChips": 100}]
    assert waiting_job(job).gangs == 2 and waiting_job(job).position == 3
    wire = explain_documents(job, views, [holder], now_s=NOW).wire()
    assert wire["queuePosition"] == 3 and wire["summary"].endswith("UltraServer u0 reserved for it")
    near = {n["name"]: n for n in wire["nearestUltraServers"]}
    assert near["u0"]["holders"] == [{"job": "ml/run", "chips": 144,
                                      "predictedEndSeconds": NOW + 7200}]
    # two 64-chip gangs: u1 has room for one now, u0 for the other once ml/run ends
    assert wire["predictedStartSeconds"] == NOW + 7200
    assert job_name_of_key("ij/serve/chat#1") == "serve/chat"
