"""The in-process runtime contract (used by the API's embedded fleet and cluster mode).

Fleet under test, two Gen2 UltraServers (36 servers x 4 chips each):

    gen2-0000  [s00: c00 c01 c02 c03] [s01 ...] ... [s35]
    gen2-0001  [s00 ...] ...
"""

from __future__ import annotations

import pytest
from ultraplane.simulator.runtime import JobRuntime

from ultraplane.hardware.topology import build_fleet

SERVER0 = [f"gen2-0000/s00/c{c:02d}" for c in range(4)]


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def training(seconds: float, *, policy: str = "RestartAll", interval: float = 600.0) -> dict:
    return {"chips": 4, "precision": "BF16", "work": {"durationSeconds": seconds},
            "checkpointIntervalSeconds": interval, "failurePolicy": policy}


def runtime(scale: float = 1.0) -> tuple[JobRuntime, Clock]:
    clock = Clock()
    return JobRuntime(build_fleet("trn3-gen2", 2), clock=clock, time_scale=scale), clock


def test_idle_fleet_draws_idle_power_and_busy_fleet_more() -> None:
    rt, clock = runtime()
    idle = rt.fleet()
    assert idle.power_watts == pytest.approx(288 * 300.0)  # 288 chips x assumed idle 300 W
    assert idle.utilization == 0.0
    rt.start("a", training(10_000), SERVER0)
    clock.t += 100
    rt.advance()
    busy = rt.fleet()
    assert busy.power_watts > idle.power_watts
    assert busy.power_watts < 288 * 1000.0  # never a constant peak
    assert busy.per_ultraserver["gen2-0001"] == (0.0, 144 * 300.0)
    assert busy.energy_kwh == pytest.approx(busy.power_watts * 100 / 3.6e6)


def test_job_runs_checkpoints_and_succeeds() -> None:
    rt, clock = runtime()
    rt.start("a", training(1000), SERVER0)  # one server: no spread slowdown
    clock.t += 700  # 600 s of work, a 30 s checkpoint, 70 s more
    assert rt.advance() == []
    s = rt.status("a")
    assert (s.phase, s.completed_steps, s.checkpointed_steps) == ("Running", 670, 600)
    assert s.progress_percent == pytest.approx(67.0)
    assert 0 < s.utilization <= 1 and s.power_watts > 4 * 300
    clock.t += 1000
    [ev] = rt.advance()
    assert (ev.key, ev.kind, ev.t_s) == ("a", "Succeeded", pytest.approx(1000 + 1030))
    s = rt.status("a")
    assert s.phase == "Succeeded" and s.progress_percent == 100 and s.end_time_s == ev.t_s
    assert s.energy_kwh == pytest.approx(s.energy_kwh) and s.energy_kwh > 0
    assert rt.status("a").power_watts == 0.0


def test_stop_keeps_checkpoint_and_resume_loses_work_since_it() -> None:
    rt, clock = runtime()
    rt.start("a", training(1000), SERVER0)
    clock.t += 700
    stopped = rt.stop("a")
    assert stopped is not None and stopped.checkpointed_steps == 600
    rt.start("a", training(1000), SERVER0, resume_steps=stopped.checkpointed_steps)
    clock.t += 59
    rt.advance()
    assert rt.status("a").completed_steps == 600  # restart cost (60 s) first
    assert rt.status("a").energy_kwh > stopped.energy_kwh  # energy carries over attempts
    clock.t += 1 + 400
    [ev] = rt.advance()
    assert ev.kind == "Succeeded"
    assert rt.stop("missing") is None


@pytest.mark.parametrize("policy", ["Fail", "RestartAll", "ReplaceAffected"])
def test_chip_failure_halts_the_job_and_leaves_the_policy_to_the_core(policy: str) -> None:
    rt, clock = runtime()
    rt.start("a", training(5000, policy=policy), SERVER0)
    rt.start("b", training(5000), [f"gen2-0001/s00/c{c:02d}" for c in range(4)])
    clock.t += 650
    assert rt.fail_chip("gen2-0000/s00/c02") == ["a"]
    assert rt.fail_chip("gen2-0000/s20/c00") == []  # no job there
    [ev] = rt.advance()
    assert (ev.key, ev.kind) == ("a", "ChipFailed")  # even under Fail: the core decides that
    s = rt.status("a")
    assert s.phase == "Running" and s.completed_steps == 600 and s.power_watts == 0.0
    clock.t += 1000
    rt.advance()
    assert rt.status("a").completed_steps == 600  # frozen until restarted elsewhere
    assert rt.status("b").completed_steps > 600


def test_time_scale_and_training_model_spec() -> None:
    rt, clock = runtime(scale=1000.0)
    spec = {"chips": 144, "precision": "MXFP8", "model": {"parametersBillions": 70},
            "work": {"steps": 100, "tokensPerStep": 4_000_000}}
    rt.start("big", spec, [f"gen2-0000/s{s:02d}/c{c:02d}" for s in range(36) for c in range(4)])
    clock.t += 0.5  # 500 simulated seconds
    rt.advance()
    s = rt.status("big")
    # 6 x 70e9 x 4e6 FLOPs / (144 x 2517 TFLOPS x 0.40 MFU) = 11.6 s per step, plus exposed comm
    assert 25 <= s.completed_steps <= 43
    assert s.total_steps == 100


def test_inference_reports_tokens_and_runs_until_stopped() -> None:
    rt, clock = runtime()
    spec = {"replicas": 2, "chipsPerReplica": 4, "precision": "MXFP8",
            "model": {"parametersBillions": 70}, "latencySLO": {"timePerOutputTokenMs": 50},
            "load": {"tokensPerSecond": 1000}}
    chips = SERVER0 + [f"gen2-0000/s01/c{c:02d}" for c in range(4)]
    rt.start("inf", spec, chips, kind="InferenceJob")
    clock.t += 10_000
    assert rt.advance() == []
    s = rt.status("inf")
    assert s.phase == "Running" and s.tokens_per_second == pytest.approx(1000)
    assert s.slo_met and s.tokens_per_megawatt and s.tokens_per_megawatt > 0


def test_bad_input_is_a_clear_error() -> None:
    rt, _ = runtime()
    with pytest.raises(ValueError, match="not in this fleet"):
        rt.start("x", training(10), ["nowhere-0000/s00/c00"])
    with pytest.raises(ValueError, match="steps or durationSeconds"):
        rt.start("x", {"chips": 4, "work": {}}, SERVER0)
    with pytest.raises(KeyError):
        rt.status("x")


def test_a_power_cap_lowers_the_draw_slows_the_job_and_keeps_its_work() -> None:
    from ultraplane.simulator.runtime import JobRuntime

    from ultraplane.hardware.powermodels import chip_power_of
    from ultraplane.hardware.topology import build_fleet

    now = [0.0]
    runtime = JobRuntime(build_fleet("trn3-gen2", 1), clock=lambda: now[0])
    chips = [f"gen2-0000/s{s:02d}/c{c:02d}" for s in range(36) for c in range(4)]
    spec = {"chips": 144, "work": {"durationSeconds": 10_000}, "checkpointIntervalSeconds": 600}
    runtime.start("tj/a/free", spec, chips)
    runtime.advance()
    uncapped = runtime.status("tj/a/free")
    now[0] = 1_000.0
    runtime.advance()
    before = runtime.status("tj/a/free")
    runtime.set_cap("tj/a/free", 600.0)  # the profile's lowest cap
    runtime.advance()
    capped = runtime.status("tj/a/free")
    assert capped.completed_steps == before.completed_steps  # no work lost
    assert capped.power_watts == pytest.approx(144 * 600.0)
    assert capped.power_watts < uncapped.power_watts
    assert capped.start_time_s == 0.0  # it started when it started
    chip = chip_power_of("trn3-gen2")
    speed = chip.speed(uncapped.power_watts / 144, 600.0)
    now[0] = 2_000.0
    runtime.advance()
    slower = runtime.status("tj/a/free")
    done = slower.completed_steps - capped.completed_steps
    # the same work rate as before (checkpoints included), times the cap's speed share
    assert done == pytest.approx(speed * before.completed_steps, rel=0.05)
    assert sum(w for *_, w, _ in runtime.chip_states("gen2-0000")) == pytest.approx(
        capped.power_watts)
    runtime.set_cap("tj/a/free", None)
    now[0] = 3_000.0
    runtime.advance()
    assert runtime.status("tj/a/free").power_watts == pytest.approx(uncapped.power_watts)
    assert slower.energy_kwh < before.energy_kwh + uncapped.power_watts * 1_000 / 3.6e6
