"""Offline replay through the core allocator and scheduler.

Fleets are built with `build_fleet("trn3-gen2", n)`: n UltraServers of 36 servers x 4 chips.

    gen2-0000  [s00 c00..c03] [s01] ... [s35]    144 chips
    gen2-0001  [s00 c00..c03] [s01] ... [s35]    144 chips
"""

from __future__ import annotations

import io

import pytest
from ultraplane.simulator.faults import FaultPlan
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.traces import TraceJob, parse_rows

from ultraplane.hardware.topology import build_fleet


def trace(text: str) -> list[TraceJob]:
    jobs, bad = parse_rows(io.StringIO("job_id,submission_time,duration,num_gpu,kind,priority,topology\n" + text))
    assert bad == []
    return jobs


def replay(text: str, us: int = 2, **cfg: object):
    return Replay(build_fleet("trn3-gen2", us), trace(text), ReplayConfig(**cfg)).run()  # type: ignore[arg-type]


def by_id(result):
    return {r.job_id: r for r in result.records}


@pytest.mark.parametrize("policy", ["ultraplane", "first-fit"])
def test_queueing_and_checkpoint_cost(policy: str) -> None:
    # three whole-UltraServer jobs on two UltraServers: the third waits for the first to end
    r = by_id(replay("a,0,1000,144\nb,0,1000,144\nc,10,1000,144\n", policy=policy))
    assert r["a"].end_s == 1030  # 1000 s of work + one 30 s checkpoint at 600 s
    assert r["c"].start_s == 1030 and r["c"].queue_delay_s == 1020
    assert all(x.status == "completed" and x.ultraservers == 1 for x in r.values())


def test_job_larger_than_the_fleet_is_rejected_not_hung() -> None:
    res = replay("big,0,100,512\nsmall,5,100,4\n")
    r = by_id(res)
    assert r["big"].status == "rejected" and r["big"].start_s is None and r["big"].reason
    assert r["small"].status == "completed"


def test_power_follows_utilization_and_energy_integrates() -> None:
    res = replay("a,0,3600,144\n", us=2)
    idle_w = 288 * 300.0
    assert res.series.power_w[0] > idle_w  # job running from t=0
    assert res.series.power_w[-1] == pytest.approx(idle_w)  # all idle after it ends
    assert res.peak_power_w < 288 * 1000.0
    job = res.records[0]
    span = res.t_end - res.t0
    extra_kwh = job.energy_kwh - 144 * 300.0 * span / 3.6e6
    assert res.energy_kwh == pytest.approx(idle_w * span / 3.6e6 + extra_kwh)
    assert res.busy_chip_s == pytest.approx(144 * span)


def test_spread_across_ultraservers_is_slower() -> None:
    # 136 chips busy on each UltraServer: a 16-chip job that opts in to spanning (topology
    # cluster) can only be split 8 + 8 over EFA, and runs slower
    res = replay("x,0,5000,136\ny,0,5000,136\na,1,1000,16,training,0,cluster\n", us=2)
    a = by_id(res)["a"]
    assert a.ultraservers == 2 and a.end_s - a.start_s > 1030 * 1.5
    # without the opt-in it waits for one UltraServer instead (locality by default)
    b = by_id(replay("x,0,5000,136\ny,0,5000,136\nb,1,1000,16\n", us=2))["b"]
    assert b.ultraservers == 1 and b.start_s is not None and b.start_s >= 5000
    # the trace duration holds for jobs whose size already forces them over EFA
    assert by_id(replay("b,0,1000,200\n", us=2))["b"].end_s == 1030


def first_chip(text: str) -> str:
    res = replay(text)
    return res.placements[0][3][0]


@pytest.mark.parametrize(
    ("policy", "status", "end"),
    [
        ("Fail", "failed", 700.0),
        # checkpoint at 600 s (written by 630 s); fails at 700; 60 s restart + 400 s left
        ("RestartAll", "completed", 1160.0),
        ("ReplaceAffected", "completed", 1160.0),
    ],
)
def test_scripted_chip_failure_follows_policy(policy: str, status: str, end: float) -> None:
    text = "a,0,1000,16\n"
    chip = first_chip(text)
    plan = FaultPlan(scripted=((700.0, chip),))
    res = replay(text, failure_policy=policy, faults=plan)
    a = res.records[0]
    assert (a.status, a.end_s) == (status, end)
    starts = [p for p in res.placements if p[2] == "start"]
    if policy == "ReplaceAffected":
        # the job keeps its 15 healthy chips and gets one replacement
        assert len(set(starts[0][3]) & set(starts[1][3])) == 15 and chip not in starts[1][3]
    if policy == "RestartAll":
        assert chip not in starts[1][3]


def test_server_failure_and_random_faults_are_seeded() -> None:
    text = "".join(f"j{i},{i * 50},2000,8\n" for i in range(40))
    plan = FaultPlan(chip_rate_per_hour=0.002, server_rate_per_hour=0.001, repair_s=600)
    one = replay(text, faults=plan, seed=3)
    two = replay(text, faults=plan, seed=3)
    other = replay(text, faults=plan, seed=4)
    ends = lambda r: [x.end_s for x in r.records]  # noqa: E731
    assert ends(one) == ends(two)
    assert ends(one) != ends(other)
    assert all(x.status == "completed" for x in one.records)
    clean = replay(text)
    assert sum(ends(one)) > sum(ends(clean))  # lost work shows up as later ends


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="policy"):
        ReplayConfig(policy="random")
    with pytest.raises(ValueError, match="chips-per-gpu"):
        ReplayConfig(chips_per_gpu=0)
    with pytest.raises(ValueError, match="fault target"):
        FaultPlan(scripted=((1.0, "nonsense"),))


def test_trace_row_with_a_model_uses_the_step_model() -> None:
    jobs, bad = parse_rows(io.StringIO(
        "job_id,submission_time,duration,num_gpu,kind,priority,topology,model,precision\n"
        "m,0,1000,16,training,,,70,BF16\nplain,0,1000,16,training,,,,BF16\n"))
    assert bad == []
    # small steps: the gradient exchange is exposed, so the chips compute less of each step
    res = Replay(build_fleet("trn3-gen2", 2), jobs, ReplayConfig(tokens_per_step=5_000)).run()
    m, plain = by_id(res)["m"], by_id(res)["plain"]
    assert m.end_s == plain.end_s == 1030  # both at their ideal spread
    assert m.energy_kwh < plain.energy_kwh  # utilisation from the 70B step model, not the default


def test_saturated_fleet_admits_in_fifo_order_with_backfill() -> None:
    # one UltraServer (144 chips): 'wide' waits for 'hog'; small jobs behind it backfill
    text = "hog,0,1000,100\nwide,1,100,100\n" + "".join(f"s{i},{2 + i},100,4\n" for i in range(11))
    r = by_id(replay(text, us=1))
    assert r["wide"].start_s == 1030  # after hog: best-effort FIFO never evicts hog
    assert [r[f"s{i}"].start_s for i in range(11)] == [2 + i for i in range(11)]  # 44 chips free: all fit


def test_a_gang_of_more_than_half_an_ultraserver_is_not_deferred_by_its_run_time() -> None:
    # one UltraServer held by 'hog' until 1030; 'wide' (128 chips, 10 h) arrived before a stream
    # of 1-hour 32-chip jobs. Ranked by run time, every one of them would go first (rank
    # 20 + 10 x 3,780 < 10 + 10 x 37,800) and take the room 'wide' needs; at 128 of 144 chips
    # it ranks by arrival instead, and starts as soon as 'hog' is gone.
    text = "hog,0,1000,144\nwide,10,36000,128\n" + "".join(
        f"s{i},{20 + i},3600,32\n" for i in range(8))
    r = by_id(replay(text, us=1))
    assert r["wide"].start_s == 1030
    assert all(r[f"s{i}"].start_s is not None and r[f"s{i}"].start_s >= 1030 for i in range(8))


@pytest.mark.parametrize(("stretch", "first"), [(10.0, "short"), (0.0, "long")])
def test_a_short_job_passes_an_older_long_one_unless_the_queue_is_fifo(
        stretch: float, first: str) -> None:
    # one UltraServer: 84 chips held by 'keep' for good, the other 60 by 'hog' until 1030;
    # 'long' (10 h) and 'short' (10 min) of 60 chips each (small enough to rank by run time)
    # wait for them, one at a time.
    # Ranks: long 10 + 10 x 37,800 (with its checkpoints); short 20 + 10 x 600: short first.
    text = "keep,0,1000000,84\nhog,0,1000,60\nlong,10,36000,60\nshort,20,600,60\n"
    r = by_id(replay(text, us=1, queue_stretch=stretch))
    assert r[first].start_s == 1030
    second = "long" if first == "short" else "short"
    assert r[second].start_s is not None and r[second].start_s >= r[first].end_s


def test_higher_priority_job_preempts_and_victim_resumes_from_checkpoint() -> None:
    r = by_id(replay("low,0,2000,144,training,0\nhigh,700,100,144,training,5\n", us=1))
    assert r["high"].start_s == 700 and r["high"].end_s == 800
    # low: 600 s checkpointed at 630; preempted at 700; back at 800 with a 60 s restart
    assert r["low"].end_s == 800 + 60 + 1400 + 2 * 30


def test_backlog_orders_by_priority_then_seq_within_free_chips() -> None:
    from ultraplane.simulator.backlogs import Backlog

    from ultraplane.placement.allocator import PlacementRequest
    from ultraplane.workloads import QueuedJob

    b = Backlog()
    for key, prio, seq, chips in [("a", 0, 1, 8), ("b", 0, 2, 2), ("c", 3, 3, 4), ("d", 0, 0, 64)]:
        b.add(QueuedJob(key, PlacementRequest(chips=chips), prio, seq))  # type: ignore[arg-type]
    assert [j.key for j in b.take(14)] == ["c", "a", "b"]  # d (64) does not fit; c outranks
    assert len(b) == 1 and list(b.sizes()) == [64]


@pytest.mark.parametrize("reservation", [True, False])
def test_waiting_whole_ultraserver_gang_reserves_and_starts_when_it_drains(
        reservation: bool) -> None:
    # gen2-0000 [ hog0 100 | 44 free ]   gen2-0001 [ hog1 110 | 34 free ]
    # big (144) waits from t=1; mid (40) arrives at t=2 and fits only in gen2-0000.
    # Reservation: mid waits, gen2-0000 drains when hog0 ends and big starts right then.
    # Without it: mid takes gen2-0000's free chips and big waits until mid ends too.
    text = ("hog0,0,1000,100,inference,0,ultraserver\n"
            "hog1,0,9000,110,inference,0,ultraserver\n"
            "big,1,100,144,inference,0,ultraserver\n"
            "mid,2,3000,40,inference,0,ultraserver\n")
    r = by_id(replay(text, reservation=reservation))
    assert all(x.status == "completed" for x in r.values())
    if reservation:
        assert r["big"].start_s == r["hog0"].end_s
        assert r["mid"].start_s == r["big"].end_s
    else:
        assert r["mid"].start_s == 2
        assert r["big"].start_s == r["mid"].end_s > r["hog0"].end_s
