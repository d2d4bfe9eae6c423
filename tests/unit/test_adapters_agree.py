"""One scenario, three adapters: the operator, the embedded REST backend and the trace replay
must make the same decisions, because all three only execute what `ultraplane.scheduling.admissions`
decides.

Fleet (both scenarios), two Trn3 Gen2 UltraServers of 144 chips in one network block:

    block-000
    +-- gen2-0000 [144 chips]
    +-- gen2-0001 [144 chips]
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from ultraplane.api.backends.embedded import EmbeddedBackend
from ultraplane.api.schemas import JobKind
from ultraplane.api.settings import Settings
from ultraplane.api.store import make_engine, migrate
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.traces import TraceJob

from tests.unit.adapter_drivers import (
    RUNTIME_CONDITIONS,
    Action,
    Arrive,
    Delete,
    EmbeddedDriver,
    FailChip,
    FailPod,
    OperatorDriver,
    Script,
    Seen,
    Wait,
    outcome,
    pod_chips,
    project,
    replay_at,
)
from tests.unit.adapter_drivers import Job as DJob
from tests.unit.operator_fakes import FakeKube, controller, settle
from ultraplane.documents.conversions import InvalidJobError
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import job_key
from ultraplane.resources import InferenceJobSpec, TrainingJobSpec

# A decision as an adapter shows it: ("running", chips) | ("waiting", ()) | ("failed", ()).
Outcome = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Job:
    name: str
    chips: int
    priority: int = 0
    replicas: int | None = None  # an InferenceJob of `replicas` x `chips`
    level: str = "ultraserver"


# Wave 1: a and b share one UltraServer, c takes the other, huge can never fit the fleet's 288 chips
# (Unsatisfiable).
# Wave 2: urgent (priority 5) needs a whole UltraServer: one domain's jobs are preempted.
TRAINING_WAVES = (
    (Job("a", 72), Job("b", 72), Job("c", 144), Job("huge", 500, level="cluster")),
    (Job("urgent", 144, priority=5),),
)
# Wave 1: t takes one UltraServer, serve (2 x 36) half the other. Wave 2: wide (3 x 36) would
# fit two replicas in the 72 chips left, not three, so it must hold nothing at all.
REPLICA_WAVES = (
    (Job("t", 144), Job("serve", 36, replicas=2)),
    (Job("wide", 36, replicas=3),),
)


def _training_spec(job: Job) -> dict[str, Any]:
    return {"chips": job.chips, "priority": job.priority,
            "topology": {"requiredLevel": job.level}, "work": {"durationSeconds": 10**6}}


def _inference_spec(job: Job) -> dict[str, Any]:
    return {"replicas": job.replicas, "chipsPerReplica": job.chips, "priority": job.priority,
            "topology": {"requiredLevel": "ultraserver"},
            "model": {"name": "llama-3-70b", "parametersBillions": 70},
            "load": {"requestsPerSecond": 10}, "durationSeconds": 10**6}


def via_operator(waves: tuple[tuple[Job, ...], ...]) -> dict[str, Outcome]:
    async def scenario() -> dict[str, Outcome]:
        kube = FakeKube()
        c = controller(kube, servers=2)
        await c.sync()
        for wave in waves:
            for job in wave:
                if job.replicas is None:
                    kube._add("trainingjobs", job.name, _training_spec(job), {})
                    body = kube.get_job("trainingjobs", "ns", job.name)
                else:
                    kube._add("inferencejobs", job.name, _inference_spec(job), {})
                    body = kube.get_job("inferencejobs", "ns", job.name)
                c.observe_job(body)
            await settle(c, 1)
        await settle(c, 2)  # the victims' Pending writes follow a cycle later
        outcomes: dict[str, Outcome] = {}
        for objs in kube.objects.values():
            for name, obj in objs.items():
                status = obj["status"]
                alloc = status.get("allocation") or {}
                chips = alloc.get("chips") or [c for r in alloc.get("replicas") or []
                                               for c in r["chips"]]
                outcomes[name] = _outcome(status.get("phase", ""), chips)
        return outcomes

    return asyncio.run(scenario())


def via_embedded(waves: tuple[tuple[Job, ...], ...], tmp_path: Path) -> dict[str, Outcome]:
    engine = make_engine(f"sqlite:///{tmp_path / 'agree.db'}")
    migrate(engine)
    now = [1_767_225_600.0]
    backend = EmbeddedBackend(
        Settings(db=str(engine.url), fleet="trn3-gen2:2", demo=False, tick_seconds=3600.0),
        engine, clock=lambda: now[0])
    backend.start(background=False)
    try:
        for wave in waves:
            for job in wave:
                kind: JobKind = "TrainingJob" if job.replicas is None else "InferenceJob"
                spec = (TrainingJobSpec.model_validate(_training_spec(job))
                        if job.replicas is None
                        else InferenceJobSpec.model_validate(_inference_spec(job)))
                backend.create_job(kind, "ns", job.name, spec, {})
            now[0] += 1
            backend.tick()
        outcomes: dict[str, Outcome] = {}
        for state in backend.jobs.values():
            chips = [c for key in state.sched_keys for c in state.held.get(key, ())]
            outcomes[state.name] = _outcome(state.phase, chips)
        return outcomes
    finally:
        backend.stop()
        engine.dispose()


def via_replay(waves: tuple[tuple[Job, ...], ...]) -> dict[str, Outcome]:
    """Wave i arrives at t = 100 * i; the decisions are those in force just after the last."""
    trace = [TraceJob(job.name, 100.0 * i, 10.0**6, job.chips, priority=job.priority,
                      topology=job.level, line=n)
             for i, wave in enumerate(waves) for n, job in enumerate(wave)]
    replay = Replay(build_fleet("trn3-gen2", 2), trace, ReplayConfig())
    result = replay.run()
    last = 100.0 * (len(waves) - 1)
    held: dict[str, tuple[str, ...]] = {}
    for job_id, t, what, chips in result.placements:
        if t > last:
            break
        if what == "start":
            held[job_id] = tuple(chips)
        else:
            held.pop(job_id, None)
    outcomes: dict[str, Outcome] = {}
    for record in result.records:
        if record.status == "rejected":
            outcomes[record.job_id] = ("failed", ())
        else:
            outcomes[record.job_id] = ("running", tuple(sorted(held[record.job_id])))\
                if record.job_id in held else ("waiting", ())
    return outcomes


def _outcome(phase: str, chips: list[str] | tuple[str, ...]) -> Outcome:
    if phase in ("Admitted", "Running"):
        return ("running", tuple(sorted(chips)))
    if phase == "Failed":
        return ("failed", ())
    assert not chips, f"a waiting job holds chips: {phase} {chips}"
    return ("waiting", ())


def test_training_decisions_agree_in_all_three_adapters(tmp_path: Path) -> None:
    operator = via_operator(TRAINING_WAVES)
    embedded = via_embedded(TRAINING_WAVES, tmp_path)
    replay = via_replay(TRAINING_WAVES)
    assert operator == embedded == replay
    assert operator["urgent"][0] == "running" and operator["huge"] == ("failed", ())
    waiting = sorted(n for n, (state, _) in operator.items() if state == "waiting")
    assert waiting in (["c"], ["a", "b"])  # one UltraServer's jobs preempted, nothing else


def test_replicas_are_admitted_all_or_nothing_by_operator_and_embedded_api(
        tmp_path: Path) -> None:
    operator = via_operator(REPLICA_WAVES)
    embedded = via_embedded(REPLICA_WAVES, tmp_path)
    assert operator == embedded
    assert operator["wide"] == ("waiting", ())  # two of three replicas fit: it holds nothing
    assert operator["serve"][0] == "running" and len(operator["serve"][1]) == 72


# -- every trigger, through all three adapters ------------------------------------------------
#
# t=0     long (144) takes one UltraServer; a, b, c (32 each, one per failure policy) the other.
# t=60    whole (288 = both UltraServers) waits and holds both (EASY: predicted to start when
#         long, a, b and c end); short (16 chips, 10 min) is predicted to end long before:
#         it backfills beside them.
# t=120   a chip under a (ReplaceAffected): only that chip is swapped.
# t=180   a chip under b (RestartAll): b is requeued whole and placed again.
# t=240   a chip under c (Fail): c fails.
# t=300   urgent (144, priority 5) preempts long: the only UltraServer with no failed chip.
# t=1800  short has finished; (embedded and operator only) t=1860 a is deleted.
EVERY_TRIGGER: Script = (
    (0.0, Arrive((DJob("long", 144), DJob("a", 32, policy="ReplaceAffected"),
                  DJob("b", 32, policy="RestartAll"), DJob("c", 32, policy="Fail")))),
    (60.0, Arrive((DJob("whole", 288, level="cluster", duration=3_600),
                   DJob("short", 16, duration=600)))),
    (120.0, FailChip("a")),
    (180.0, FailChip("b")),
    (240.0, FailChip("c")),
    (300.0, Arrive((DJob("urgent", 144, priority=5),))),
    (1800.0, Wait()),
)
DELETION: Script = ((1860.0, Delete("a")),)

# Inference (operator and embedded API): t 144 on one UltraServer, serve 2 x 36 on the other;
# wide 3 x 36 does not fit the 72 chips left, so it holds nothing; a chip under serve's second
# replica moves that replica alone; deleting serve lets wide in, all three replicas at once.
REPLICAS: Script = (
    (0.0, Arrive((DJob("t", 144), DJob("serve", 36, replicas=2)))),
    (60.0, Arrive((DJob("wide", 36, replicas=3),))),
    (120.0, FailChip("serve", replica=1)),
    (180.0, Delete("serve")),
)


def play(script: Script, tmp_path: Path) -> tuple[list[Seen], list[dict[str, Any]],
                                                   list[dict[str, Any]], dict[int, str]]:
    """Play `script` through the operator and the embedded API; after every step their
    decisions and projected status documents. Returns (decisions, operator docs, embedded
    docs, step -> failed chip)."""
    op, api = OperatorDriver(), EmbeddedDriver(tmp_path)
    decided: list[Seen] = []
    docs_op: list[dict[str, Any]] = []
    docs_api: list[dict[str, Any]] = []
    chips: dict[int, str] = {}
    try:
        for i, (t, action) in enumerate(script):
            if isinstance(action, FailChip):
                chips[i] = op.chip(action)
            op.step(t, action)
            api.step(t, action)
            a, b = op.statuses(), api.statuses()
            seen = {name: outcome(s) for name, s in a.items()}
            assert seen == {name: outcome(s) for name, s in b.items()}, (t, action)
            decided.append(seen)
            docs_op.append({name: project(s) for name, s in a.items()})
            docs_api.append({name: project(s) for name, s in b.items()})
            assert docs_op[-1] == docs_api[-1], (t, action)
    finally:
        op.close()
        api.close()
    return decided, docs_op, docs_api, chips


def test_every_trigger_is_decided_alike_by_operator_embedded_api_and_replay(
        tmp_path: Path) -> None:
    decided, docs, _, chips = play(EVERY_TRIGGER + DELETION, tmp_path)
    assert decided[:-1] == replay_at(EVERY_TRIGGER, chips)
    at = dict(zip([t for t, _ in EVERY_TRIGGER + DELETION], docs, strict=True))
    assert at[60.0]["whole"]["phase"] == "Pending" and "predicted to start in" in \
        at[60.0]["whole"]["message"]
    assert "Backfilled onto UltraServers reserved" in at[60.0]["short"]["message"]
    assert at[120.0]["a"]["reason"] == "ChipReplaced" and at[120.0]["a"]["restarts"] == 1
    # b restarted whole (RestartAll), from its checkpoint, and was placed again at once
    assert at[180.0]["b"]["restarts"] == 1 and at[180.0]["b"]["attempt"] == 2
    assert ("Preempted", "False", "ChipFailed") in {c[:3] for c in at[180.0]["b"]["conditions"]}
    assert at[240.0]["c"]["phase"] == "Failed" and at[240.0]["c"]["reason"] == "ChipFailed"
    assert at[300.0]["urgent"]["phase"] == "Running" and at[300.0]["long"]["phase"] == "Pending"
    assert ("Preempted", "True") in {c[:2] for c in at[300.0]["long"]["conditions"]}
    assert at[1800.0]["short"]["phase"] == "Succeeded"
    assert "a" not in at[1860.0]


def test_a_replica_on_a_failed_chip_moves_alone_in_operator_and_embedded_api(
        tmp_path: Path) -> None:
    decided, docs, _, _ = play(REPLICAS, tmp_path)
    before, after = docs[1]["serve"]["allocation"], docs[2]["serve"]["allocation"]
    assert after["replicas"][0] == before["replicas"][0]
    assert after["replicas"][1] != before["replicas"][1]
    assert docs[2]["serve"]["reason"] == "ChipReplaced"
    assert decided[1]["wide"] == ("waiting", ()) and decided[3]["wide"][0] == "running"
    assert len(decided[3]["wide"][1]) == 108


# -- pod failures: the failure policy of a chip's --------------------------------------------------
#
# The operator runs these jobs as pods (each has a pod template), and a pod fails as its watch
# event says. The embedded API runs no pods: there the pod's chips are lost to the job for an
# instant. To the core both are the job losing those chips (`Admissions.pods_failed`,
# `chip_failed`), and one failure policy decides both: the same decisions, the same chips;
# only the reasons name the trigger (PodFailed / ChipFailed).
#
# t=0    long (144) takes one UltraServer; a, b, c (32 each, one per failure policy) the other.
# t=60   a pod of a (ReplaceAffected) fails: only its server's 4 chips move.
# t=120  a pod of b (RestartAll) fails: b restarts whole, from its checkpoint.
# t=180  a pod of c (Fail) fails: c fails.
# t=240  d (32) arrives and is placed where c was.
POD_FAILURES: Script = (
    (0.0, Arrive((DJob("long", 144, pods=True),
                  DJob("a", 32, policy="ReplaceAffected", pods=True),
                  DJob("b", 32, policy="RestartAll", pods=True),
                  DJob("c", 32, policy="Fail", pods=True)))),
    (60.0, FailPod("a")),
    (120.0, FailPod("b")),
    (180.0, FailPod("c")),
    (240.0, Arrive((DJob("d", 32, pods=True),))),
)
# Inference: serve (2 x 36) beside t (144); a pod of serve's second replica fails, and that
# replica's chips on the pod's server move alone (an InferenceJob is always ReplaceAffected).
REPLICA_POD: Script = (
    (0.0, Arrive((DJob("t", 144, pods=True), DJob("serve", 36, replicas=2, pods=True)))),
    (60.0, FailPod("serve", replica=1)),
)
TRIGGER_WORDS = {"PodFailed": "ChipFailed", "PodReplaced": "ChipReplaced"}


def decided(status: dict[str, Any]) -> dict[str, Any]:
    """A status as far as the core decided it, whichever adapter wrote it: `project` without
    the runtime's words (the pod data plane's `PodsRunning`, the embedded runtime's messages)
    and with a pod's trigger named as a chip's."""
    doc = project(status)
    doc.pop("message", None)
    reason = doc.pop("reason", None)
    if doc.get("phase") not in ("Admitted", "Running"):
        doc["reason"] = TRIGGER_WORDS.get(reason, reason)
    doc["conditions"] = [(type_, ok, TRIGGER_WORDS.get(why, why), since)
                         for type_, ok, why, _, since in doc["conditions"]
                         if type_ not in RUNTIME_CONDITIONS]
    return doc


def play_pods(script: Script, tmp_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Play `script` through the operator with its pod data plane and through the embedded API;
    after every step they must have decided alike. Returns each step's statuses (operator,
    embedded API)."""
    op, api = OperatorDriver(pods=True), EmbeddedDriver(tmp_path)
    steps_op: list[dict[str, Any]] = []
    steps_api: list[dict[str, Any]] = []
    try:
        for t, action in script:
            op.step(t, action)
            api.step(t, action)
            a, b = op.statuses(), api.statuses()
            assert {n: outcome(s) for n, s in a.items()} == \
                {n: outcome(s) for n, s in b.items()}, (t, action)
            assert {n: decided(s) for n, s in a.items()} == \
                {n: decided(s) for n, s in b.items()}, (t, action)
            steps_op.append(a)
            steps_api.append(b)
    finally:
        op.close()
        api.close()
    return steps_op, steps_api


def _conditions(status: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(c["type"], c["status"], c["reason"]) for c in status.get("conditions") or []}


def test_a_failed_pod_is_decided_by_the_failure_policy_as_a_failed_chip_is(
        tmp_path: Path) -> None:
    ops, apis = play_pods(POD_FAILURES, tmp_path)
    at_op = dict(zip([t for t, _ in POD_FAILURES], ops, strict=True))
    at_api = dict(zip([t for t, _ in POD_FAILURES], apis, strict=True))
    # ReplaceAffected: only the failed pod's chips moved; the job was never requeued
    before, after = at_op[0.0]["a"], at_op[60.0]["a"]
    gone = set(before["allocation"]["chips"]) - set(after["allocation"]["chips"])
    assert sorted(gone) == pod_chips(before, 0) and len(gone) == 4
    assert after["restarts"] == 1 and after["phase"] == "Running"
    assert ("Admitted", "True", "PodReplaced") in _conditions(after)
    assert ("Admitted", "True", "ChipReplaced") in _conditions(at_api[60.0]["a"])
    # RestartAll: requeued whole and admitted again
    assert at_op[120.0]["b"]["restarts"] == 1 and at_op[120.0]["b"]["attempt"] == 2
    assert ("Preempted", "False", "PodFailed") in _conditions(at_op[120.0]["b"])
    # Fail: the job fails, with the trigger's words and the policy's
    failed_op, failed_api = at_op[180.0]["c"], at_api[180.0]["c"]
    assert (failed_op["phase"], failed_op["reason"]) == ("Failed", "PodFailed")
    assert (failed_api["phase"], failed_api["reason"]) == ("Failed", "ChipFailed")
    assert "exit code 1" in failed_op["message"] and failed_op["message"].endswith("(Fail).")
    assert failed_api["message"].endswith("(Fail).")
    assert at_op[240.0]["d"]["phase"] == "Running"


def test_a_failed_pod_of_a_replica_moves_that_replica_alone_in_operator_and_embedded_api(
        tmp_path: Path) -> None:
    ops, _ = play_pods(REPLICA_POD, tmp_path)
    before, after = ops[0]["serve"]["allocation"], ops[1]["serve"]["allocation"]
    assert after["replicas"][0] == before["replicas"][0]
    moved = set(before["replicas"][1]["chips"]) - set(after["replicas"][1]["chips"])
    assert sorted(moved) == pod_chips(ops[0]["serve"], 1)
    assert ("Admitted", "True", "PodReplaced") in _conditions(ops[1]["serve"])


# -- invalid specs ------------------------------------------------------------------------------
#
# A spec the core cannot read, past a schema that let it through (the operator reads objects an
# older CRD admitted; `model_copy` skips the REST model's own check): the operator's object
# exists, so it fails `InvalidSpec` with the core reader's sentence; the embedded API refuses it
# at create with that same sentence and keeps nothing. Neither queues it or gives it a chip, and
# the jobs around it are decided alike.
INVALID = (DJob("zero", 8), DJob("noreplica", 36, replicas=2), DJob("unqueued", 8))
BREAK = {"zero": {"chips": 0}, "noreplica": {"chipsPerReplica": 0}, "unqueued": {"queueName": ""}}
FIELDS_OF = {"chipsPerReplica": "chips_per_replica", "queueName": "queue_name"}


def test_an_invalid_spec_is_refused_alike_by_operator_and_embedded_api(tmp_path: Path) -> None:
    op, api = OperatorDriver(), EmbeddedDriver(tmp_path)
    try:
        op.step(0.0, Arrive((DJob("first", 72),)))
        api.step(0.0, Arrive((DJob("first", 72),)))
        refused: dict[str, str] = {}
        for job in INVALID:
            spec = {**job.spec(), **BREAK[job.name]}
            op.kube._add(job.plural, job.name, spec, {})
            op.c.observe_job(op.kube.bump(op.kube.objects[job.plural][job.name]))
            kind: JobKind = "TrainingJob" if job.replicas is None else "InferenceJob"
            valid = (TrainingJobSpec if job.replicas is None else InferenceJobSpec
                     ).model_validate(job.spec())
            broken = valid.model_copy(update={FIELDS_OF.get(k, k): v
                                              for k, v in BREAK[job.name].items()})
            with pytest.raises(InvalidJobError) as refusal:
                api.b.create_job(kind, "ns", job.name, broken, {})
            refused[job.name] = str(refusal.value)
        op.step(60.0, Arrive((DJob("after", 72),)))
        api.step(60.0, Arrive((DJob("after", 72),)))
        a, b = op.statuses(), api.statuses()
        for job in INVALID:
            status = a.pop(job.name)
            assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
            assert status["message"] == refused[job.name]
            key = job_key("TrainingJob" if job.replicas is None else "InferenceJob", "ns",
                          job.name)
            assert "allocation" not in status and not op.c.admissions.is_waiting(key)
            assert job.name not in b and not api.b.admissions.is_waiting(key)
        assert {n: project(s) for n, s in a.items()} == {n: project(s) for n, s in b.items()}
        assert outcome(a["after"])[0] == "running"
    finally:
        op.close()
        api.close()


# -- the same, on drawn scenarios ---------------------------------------------------------------
class AdaptersAgree(RuleBasedStateMachine):
    """Drawn arrivals, chip failures, deletions and waits, played through the operator and
    the embedded API at once: after every step, the same decisions and status documents.
    (The replay is left out here: its chip failures must be known before it runs.)"""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="agree-"))
        self.op, self.api = OperatorDriver(), EmbeddedDriver(self.tmp)
        self.t = 0.0
        self.made = 0

    def play(self, action: Action, after: float = 60.0) -> None:
        self.t += after
        self.op.step(self.t, action)
        self.api.step(self.t, action)

    @rule(chips=st.sampled_from([16, 32, 72, 144, 288]), priority=st.integers(0, 2),
          policy=st.sampled_from(["RestartAll", "ReplaceAffected", "Fail"]),
          replicas=st.sampled_from([None, None, 2]),
          duration=st.sampled_from([600, 3_600, 36_000]))
    def arrive(self, chips: int, priority: int, policy: str, replicas: int | None,
               duration: int) -> None:
        self.made += 1
        if replicas is not None:
            chips = min(chips, 72)
        self.play(Arrive((DJob(f"j{self.made}", chips, priority, replicas,
                               "cluster" if chips > 144 else "ultraserver", duration,
                               policy),)))

    @rule(data=st.data())
    def fail_chip(self, data: st.DataObject) -> None:
        running = sorted(name for name, s in self.op.statuses().items()
                         if outcome(s)[0] == "running")
        assume(running)
        name = data.draw(st.sampled_from(running))
        replicas = len(self.op.statuses()[name]["allocation"].get("replicas") or [None])
        self.play(FailChip(name, data.draw(st.integers(0, replicas - 1))))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        names = sorted(self.op.statuses())
        assume(names)
        self.play(Delete(data.draw(st.sampled_from(names))))

    @rule(after=st.sampled_from([60.0, 900.0, 3_600.0]))
    def wait(self, after: float) -> None:
        self.play(Wait(), after)

    @invariant()
    def same_decisions_and_documents(self) -> None:
        a, b = self.op.statuses(), self.api.statuses()
        assert {n: outcome(s) for n, s in a.items()} == {n: outcome(s) for n, s in b.items()}
        assert {n: project(s) for n, s in a.items()} == {n: project(s) for n, s in b.items()}

    def teardown(self) -> None:
        self.op.close()
        self.api.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# Derandomized: CI runs the same drawn scenarios every time (a seed that finds a new
# divergence is a bug to fix, not a flaky run); set derandomize=False locally to explore.
AdaptersAgree.TestCase.settings = settings(
    max_examples=15, stateful_step_count=8, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow])
test_drawn_scenarios_agree_in_operator_and_embedded_api = AdaptersAgree.TestCase
