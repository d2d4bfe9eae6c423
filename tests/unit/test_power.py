"""Power budgets in the scheduling cycle: admission within headroom, caps, power-down.

Fleets are Trn3 Gen2 UltraServers (144 chips; assumed 1,000 W peak, 300 W idle, 30 W standby,
600 W lowest cap per chip). A job at the default activity (0.9, BF16) is predicted at
300 + 700 x 0.9 x 0.95 = 898.5 W per chip; the Predicted policy adds 5% to the dynamic part:
628.4 W over idle per chip, 90.5 kW over idle for 144 chips (43.2 kW at the 600 W floor).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ultraplane.hardware.powermodels import chip_power_of
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, PlacementRequest
from ultraplane.policies.budgetdocuments import budget_file
from ultraplane.policies.powerbook import NO_POWER, JobPower, PowerBook
from ultraplane.policies.powerbudgets import BudgetSpec, PowerPolicy
from ultraplane.scheduling.admissions import Admissions
from ultraplane.workloads import QueuedJob

GEN2 = "trn3-gen2"
IDLE_US = 144 * 300.0  # one idle Gen2 UltraServer
EXTRA = 144 * 598.5 * 1.05  # one 144-chip job over idle, Predicted with its 5% margin


def fleet(budgets: list[BudgetSpec], count: int = 2, *, capping: bool = True,
          power_down: float = 0.0) -> Admissions:
    book = PowerBook(budgets, capping=capping, idle_power_down_s=power_down)
    return Admissions(Allocator(build_fleet(GEN2, count)), reservation=False, power=book)


def job(key: str, chips: int = 144, priority: int = 0, seq: int = 0) -> QueuedJob:
    return QueuedJob(JobKey(key), PlacementRequest(chips=chips), priority, seq)


def cycle(adm: Admissions, *jobs: QueuedJob, now: float = 0.0
          ) -> tuple[list[str], dict[str, tuple[str, str]]]:
    for j in jobs:
        adm.submit(j)
    d = adm.cycle(now)
    return [a.key for a in d.admitted], {p.key: (p.reason, p.message) for p in d.pending}


def test_the_simulator_charges_the_core_model() -> None:
    from ultraplane.simulator.fleets import hardware
    from ultraplane.simulator.models import Assumptions

    chip = chip_power_of(GEN2)
    assert hardware(GEN2).chip_power(0.9, "BF16", Assumptions()) == pytest.approx(
        chip.busy(0.9, "BF16")) == pytest.approx(898.5)


def test_a_job_over_the_headroom_waits_with_the_shortfall_in_kw() -> None:
    # gen2-0000 [ a 144 ]  gen2-0001 [ b? 144 ]   fleet budget: idle + 100 kW, no capping
    adm = fleet([BudgetSpec("row-3", 2 * IDLE_US + 100e3)], capping=False)
    admitted, pending = cycle(adm, job("a", seq=0), job("b", seq=1))
    assert admitted == ["a"]
    reason, message = pending["b"]
    assert reason == NO_POWER
    short = (2 * IDLE_US + 2 * EXTRA - (2 * IDLE_US + 100e3)) / 1e3
    assert message.startswith(f"waiting for {short:,.1f} kW of headroom in budget row-3")
    # a ends: b is admitted
    adm.finished(JobKey("a"), "Succeeded")
    assert cycle(adm)[0] == ["b"]


def test_capping_admits_instead_of_refusing_and_keeps_the_budget() -> None:
    # both jobs fit at the 600 W floor (43.2 kW over idle each), not uncapped
    watts = 2 * IDLE_US + 120e3
    adm = fleet([BudgetSpec("fleet", watts)])
    admitted, _ = cycle(adm, job("a", seq=0), job("b", seq=1))
    assert admitted == ["a", "b"]
    assert adm.power is not None
    caps = adm.power.caps()
    assert caps["a"] is not None and caps["a"] == caps["b"]
    assert 600 <= caps["a"] < 1000
    assert adm.power.predicted("fleet") <= watts + 1e-6
    status = adm.power.status()[0]
    assert status.headroom_w >= -1e-6 and {k for k, _ in status.capped} == {"a", "b"}


def test_lower_priority_is_capped_first() -> None:
    watts = 2 * IDLE_US + EXTRA + 60e3
    adm = fleet([BudgetSpec("fleet", watts)])
    admitted, _ = cycle(adm, job("hi", priority=5, seq=0), job("lo", priority=1, seq=1))
    assert admitted == ["hi", "lo"]
    assert adm.power is not None
    caps = adm.power.caps()
    assert caps["hi"] is None and caps["lo"] is not None


def test_a_lower_priority_job_is_never_admitted_by_capping_a_higher_one() -> None:
    watts = 2 * IDLE_US + EXTRA + 10e3  # "lo" would fit only if "hi" were capped
    adm = fleet([BudgetSpec("fleet", watts)])
    admitted, pending = cycle(adm, job("hi", priority=5, seq=0), job("lo", priority=1, seq=1))
    assert admitted == ["hi"] and pending["lo"][0] == NO_POWER


def test_peak_policy_counts_every_chip_at_peak() -> None:
    watts = 2 * IDLE_US + 144 * 700.0 + 1.0  # one job at peak, exactly
    adm = fleet([BudgetSpec("fleet", watts, policy=PowerPolicy.PEAK)], capping=False)
    admitted, pending = cycle(adm, job("a", seq=0), job("b", chips=4, seq=1))
    assert admitted == ["a"] and pending["b"][0] == NO_POWER


def test_nested_budgets_each_bound_their_own_ultraservers() -> None:
    # facility over both; row-a over gen2-0000 only, room for one 72-chip job
    rows = [BudgetSpec("facility", 10e6),
            BudgetSpec("row-a", IDLE_US + 72 * 628.425 + 1, ultraservers=("gen2-0000",),
                       parent="facility")]
    adm = fleet(rows, capping=False)
    for j in (job("a", 72, seq=0), job("b", 72, seq=1), job("c", 144, seq=2)):
        adm.submit(j)
    decided = adm.cycle(0.0)
    on = {d.key: {us for p in d.placements for us in p.ultraservers} for d in decided.admitted}
    # b does not fit row-a beside a: it goes outside row-a, to gen2-0001; c then finds no room
    assert on == {"a": {"gen2-0000"}, "b": {"gen2-0001"}}
    assert [(p.key, p.reason) for p in decided.pending] == [("c", "NoCapacity")]


def test_an_inference_floor_is_kept() -> None:
    # at its 850 W latency floor svc takes 79.2 kW over idle, b at 600 W 43.2 kW: 122.4 kW
    adm = fleet([BudgetSpec("fleet", 2 * IDLE_US + 125e3)])
    assert adm.power is not None
    adm.power.describe(JobKey("svc"), JobPower(cap_floor_w=850.0))
    admitted, _ = cycle(adm, job("svc", seq=0), job("b", seq=1))
    caps = adm.power.caps()
    assert admitted == ["svc", "b"]
    assert caps["svc"] is None or caps["svc"] >= 850.0
    assert adm.power.predicted("fleet") <= 2 * IDLE_US + 125e3 + 1e-6
    adm2 = fleet([BudgetSpec("fleet", 2 * IDLE_US + 120e3)])
    assert adm2.power is not None
    adm2.power.describe(JobKey("svc"), JobPower(cap_floor_w=850.0))
    assert cycle(adm2, job("svc", seq=0), job("b", seq=1))[1]["b"][0] == NO_POWER


def test_idle_ultraservers_power_down_and_powered_ones_are_preferred() -> None:
    # gen2-0000 [ idle ]  gen2-0001 [ idle ]  -> both down after 600 s; a job wakes one
    adm = fleet([BudgetSpec("fleet", 10e6)], power_down=600.0)
    assert adm.power is not None
    states = adm.power.states
    assert states.due(599.0) == []
    assert sorted(states.due(600.0)) == ["gen2-0000", "gen2-0001"]
    assert adm.power.predicted("fleet") == pytest.approx(2 * 144 * 30.0)
    admitted, _ = cycle(adm, job("a", 72, seq=0), now=700.0)
    assert admitted == ["a"]
    woke = adm.placements(JobKey("a"))[0].ultraservers[0]
    assert states.ready_at(woke) == pytest.approx(1000.0)
    # the next job goes to the powered UltraServer, not the sleeping one
    admitted, _ = cycle(adm, job("b", 72, seq=1), now=800.0)
    assert adm.placements(JobKey("b"))[0].ultraservers == (woke,)
    assert len(states.down()) == 1


def test_budgets_yaml_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "budgets.yaml"
    path.write_text("""
- {name: dc, watts: 1000000}
- {name: row-1, watts: 400000, ultraServers: {blocks: [block-000]}, parent: dc, policy: Peak}
""")
    specs = budget_file(path)
    assert [s.name for s in specs] == ["dc", "row-1"] and specs[1].policy == PowerPolicy.PEAK
    assert specs[1].blocks == ("block-000",)
    for bad, words in [("- {name: a, watts: -1}", "power budget a: watts"),
                       ("- {name: a, watts: 1, parent: b}", "parent b is not a budget"),
                       ("- {name: a, watts: 1, policy: Lots}", "power budget a: policy"),
                       ("- {name: a, watts: 1, volts: 3}", "volts"),
                       ("[", "not valid YAML"),
                       # the simulator's old format: one sentence saying what to write instead
                       ("budgets:\n  - {name: a, watts: 1}", "without the `budgets:` key"),
                       ("- {name: a, watts: 1, blocks: [b]}", "ultraServers: {blocks: ...}")]:
        path.write_text(bad)
        with pytest.raises(ValueError, match=re.escape(words)):
            budget_file(path)


def test_measured_admits_on_what_was_drawn_and_predicted_never_scales_down() -> None:
    # a draws half its modelled dynamic power; under Measured, b fits where Predicted refuses it
    watts = 2 * IDLE_US + EXTRA + 0.6 * EXTRA
    for policy, admitted_b in ((PowerPolicy.MEASURED, True), (PowerPolicy.PREDICTED, False)):
        adm = fleet([BudgetSpec("fleet", watts, policy=policy)], capping=False)
        assert adm.power is not None
        assert cycle(adm, job("a", seq=0))[0] == ["a"]
        where = adm.placements(JobKey("a"))[0].ultraservers[0]
        drawn = {us: IDLE_US for us in ("gen2-0000", "gen2-0001")}
        drawn[where] += 0.5 * EXTRA / 1.05
        adm.power.measure(drawn)
        assert adm.power.status()[0].measured_w == pytest.approx(sum(drawn.values()))
        admitted, _ = cycle(adm, job("b", seq=1), now=1.0)
        assert (admitted == ["b"]) is admitted_b, policy


def test_a_capped_job_says_for_how_long() -> None:
    adm = fleet([BudgetSpec("fleet", 2 * IDLE_US + 120e3)])
    assert adm.power is not None
    cycle(adm, job("a", seq=0), job("b", seq=1))
    adm.power.caps(now=100.0)
    adm.power.caps(now=250.0)  # still capped: the clock keeps counting from 100 s
    assert adm.power.capped_for(JobKey("a"), 400.0) == pytest.approx(300.0)
    adm.finished(JobKey("b"), "Succeeded")
    adm.power.caps(now=500.0)
    assert adm.power.cap_of(JobKey("a")) is None and adm.power.capped_for(JobKey("a"), 600) is None


def test_the_power_down_break_even_is_the_wake_time_when_waking_draws_idle() -> None:
    # staying up for T idle costs T x (idle - standby); a wake costs wake_s x idle over
    # standby's share: equal at T = wake_s (Gen2: 300 s)
    chip = chip_power_of(GEN2)
    assert chip.break_even_s == pytest.approx(chip.wake_s) == pytest.approx(300.0)


def test_the_first_job_waiting_for_headroom_reserves_it_and_only_shorter_jobs_backfill() -> None:
    # gen2-0000 [ a 72, ends 1 h ]  gen2-0001 [ b 144, ends 2 h ]  gen2-0002 [ big? 144 ]
    # budget: idle + a (45.2 kW) + b (90.5 kW) + 50 kW; big needs 90.5 kW: 40.5 kW short,
    # a's end frees 45.2 kW, so 4.7 kW are spare then; an 8-chip job needs 5.0 kW
    watts = 3 * IDLE_US + EXTRA / 2 + EXTRA + 50e3
    book = PowerBook([BudgetSpec("fleet", watts)], capping=False)
    adm = Admissions(Allocator(build_fleet(GEN2, 3)), reservation=True, power=book)
    timed = [QueuedJob(JobKey("a"), PlacementRequest(chips=72), seq=0, expected_s=3600.0),
             QueuedJob(JobKey("b"), PlacementRequest(chips=144), seq=1, expected_s=7200.0)]
    assert cycle(adm, *timed)[0] == ["a", "b"]
    big = QueuedJob(JobKey("big"), PlacementRequest(chips=144), seq=2, expected_s=3600.0)
    short = QueuedJob(JobKey("short"), PlacementRequest(chips=8), seq=3, expected_s=600.0)
    long = QueuedJob(JobKey("long"), PlacementRequest(chips=8), seq=4, expected_s=7200.0)
    admitted, pending = cycle(adm, big, short, long, now=0.0)
    # short ends (600 s) before a frees big's headroom (3,600 s); long would still hold
    # 5.0 kW then, more than the 4.7 kW spare, and delay big
    assert admitted == ["short"]
    assert pending["big"][0] == NO_POWER and "reserved for it" in pending["big"][1]
    assert "predicted in 60.0 min" in pending["big"][1]
    assert pending["long"][0] == NO_POWER and "reserved for job big" in pending["long"][1]
    # without the reservation, long would take the headroom big waits for
    free = Admissions(Allocator(build_fleet(GEN2, 3)), reservation=False,
                      power=PowerBook([BudgetSpec("fleet", watts)], capping=False))
    cycle(free, *timed)
    assert cycle(free, big, short, long, now=0.0)[0] == ["short", "long"]
    # a ends: big starts; the 4.7 kW left beside it do not hold long
    adm.finished(JobKey("short"), "Succeeded")
    adm.finished(JobKey("a"), "Succeeded")
    admitted, pending = cycle(adm, now=3600.0)
    assert admitted == ["big"] and pending["long"][1].startswith("waiting for 0.3 kW")


def test_a_job_may_take_the_headroom_spare_when_the_reserved_job_starts() -> None:
    # as above with 60 kW over a and b: a's end leaves 14.7 kW spare beside big, so a long
    # 8-chip job (5.0 kW) may run now, and a second one too, but not a third
    watts = 3 * IDLE_US + EXTRA / 2 + EXTRA + 60e3
    adm = Admissions(Allocator(build_fleet(GEN2, 3)), reservation=True,
                     power=PowerBook([BudgetSpec("fleet", watts)], capping=False))
    cycle(adm, QueuedJob(JobKey("a"), PlacementRequest(chips=72), seq=0, expected_s=3600.0),
          QueuedJob(JobKey("b"), PlacementRequest(chips=144), seq=1, expected_s=7200.0))
    longs = [QueuedJob(JobKey(f"long{i}"), PlacementRequest(chips=8), seq=3 + i,
                       expected_s=7200.0) for i in range(3)]
    big = QueuedJob(JobKey("big"), PlacementRequest(chips=144), seq=2, expected_s=3600.0)
    admitted, pending = cycle(adm, big, *longs, now=0.0)
    assert admitted == ["long0", "long1"] and pending["long2"][0] == NO_POWER


def test_a_job_over_its_budget_even_alone_reserves_nothing() -> None:
    # gen2-0000 [ a 8 ]  gen2-0001 [ huge? 288 over both ]  budget below huge's draw alone
    book = PowerBook([BudgetSpec("fleet", 2 * IDLE_US + 100e3)], capping=False)
    adm = Admissions(Allocator(build_fleet(GEN2, 2)), reservation=True, power=book)
    huge = QueuedJob(JobKey("huge"), PlacementRequest(chips=288), seq=0)
    small = QueuedJob(JobKey("small"), PlacementRequest(chips=8), seq=1)
    admitted, pending = cycle(adm, huge, small)
    assert admitted == ["small"] and pending["huge"][0] == NO_POWER
    assert "reserved" not in pending["huge"][1]


def test_a_higher_priority_job_evicts_a_lower_one_to_free_headroom() -> None:
    # gen2-0000 [ low 144, priority 0 ]  gen2-0001 [ high? 144, priority 1 ]
    # budget: idle + 80 kW: room for one 144-chip job (capped), not two even at the 43.2 kW floor
    adm = fleet([BudgetSpec("fleet", 2 * IDLE_US + 80e3)])
    assert cycle(adm, job("low", seq=0))[0] == ["low"]
    adm.submit(job("high", priority=1, seq=1))
    d = adm.cycle(0.0)
    assert [a.key for a in d.admitted] == ["high"]
    assert [(p.key, p.by) for p in d.preempted] == [("low", "high")]
    # an equal priority never evicts: it waits for the headroom
    adm2 = fleet([BudgetSpec("fleet", 2 * IDLE_US + 80e3)])
    cycle(adm2, job("first", seq=0))
    admitted, pending = cycle(adm2, job("second", seq=1))
    assert admitted == [] and pending["second"][0] == NO_POWER
