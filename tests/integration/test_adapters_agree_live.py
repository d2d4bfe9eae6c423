"""The cross-adapter scenario of tests/unit/test_adapters_agree.py with the operator on a real
API server: the live operator decides what the embedded REST backend and the trace replay
decide (UltraServer names differ, so chips are compared by UltraServer index).

    block-000
    +-- <ns>-a [144 chips]   (gen2-0000 in the other adapters)
    +-- <ns>-b [144 chips]   (gen2-0001)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.operator_harness import Harness
from tests.unit.adapter_drivers import Arrive, EmbeddedDriver, FailChip, Job, outcome, target
from tests.unit.test_adapters_agree import (
    TRAINING_WAVES,
    Outcome,
    _outcome,
    _training_spec,
    via_embedded,
    via_replay,
)


def _by_index(outcomes: dict[str, Outcome], names: list[str]) -> dict[str, Outcome]:
    index = {name: str(i) for i, name in enumerate(names)}

    def local(chip: str) -> str:
        us, _, rest = chip.partition("/")
        return f"{index[us]}/{rest}"

    return {job: (state, tuple(sorted(local(c) for c in chips)))
            for job, (state, chips) in outcomes.items()}


def via_live_operator(op: Harness) -> dict[str, Outcome]:
    names = [f"{op.ns}-a", f"{op.ns}-b"]
    for name in names:
        op.ultraserver(name)
    op.start()
    first, second = TRAINING_WAVES
    for job in first:
        op.job(job.name, job.chips, job.priority, **{
            k: v for k, v in _training_spec(job).items() if k not in ("chips", "priority")})
    for job in first:
        op.wait(f"{job.name} decided", lambda name=job.name: (op.get(name).get("status") or {})
                .get("phase") in ("Admitted", "Failed", "Pending"))
    (urgent,) = second
    op.job(urgent.name, urgent.chips, urgent.priority,
           topology={"requiredLevel": urgent.level}, work={"durationSeconds": 10**6})
    op.phase(urgent.name, "Admitted", timeout=60)

    def settled() -> dict[str, Outcome] | None:
        outcomes: dict[str, Outcome] = {}
        for body in op.jobs():
            status = body.get("status") or {}
            phase = str(status.get("phase") or "")
            chips = (status.get("allocation") or {}).get("chips") or []
            if phase in ("Admitted", "Running") or not chips:
                outcomes[body["metadata"]["name"]] = _outcome(phase, chips)
            else:
                return None  # a victim whose eviction is not written yet
        held = [c for _, cs in outcomes.values() for c in cs]
        return outcomes if len(held) == len(set(held)) else None

    outcomes: dict[str, Outcome] = op.wait("the victims' evictions written", settled, 60)
    return _by_index(outcomes, names)


def test_the_live_operator_decides_as_the_embedded_api_and_the_replay(
        op: Harness, tmp_path: Path) -> None:
    live = via_live_operator(op)
    embedded = _by_index(via_embedded(TRAINING_WAVES, tmp_path),
                         ["gen2-0000", "gen2-0001"])
    replay = _by_index(via_replay(TRAINING_WAVES), ["gen2-0000", "gen2-0001"])
    assert live == embedded == replay
    assert live["huge"] == ("failed", ())


# A chip fails under a job of each failure policy, on the live operator and in the embedded
# API (`tests/unit/adapter_drivers.py`): the same decisions, reasons, counters and conditions.
#
#     <ns>-a [long 144]          <ns>-b [a 32 | b 32 | c 32]    (gen2-0000, gen2-0001 elsewhere)
POLICY_JOBS = (Job("a", 32, policy="ReplaceAffected"), Job("b", 32, policy="RestartAll"),
               Job("c", 32, policy="Fail"), Job("long", 144))
OWNED = ("Admitted", "Preempted")  # the operator's own conditions (no kubelet runs here)


def _decided(status: dict[str, Any], local: Callable[[str], str]) -> tuple[Any, ...]:
    state, chips = outcome(status)
    conditions = sorted((c["type"], c["status"], c.get("reason"))
                        for c in status.get("conditions") or [] if c["type"] in OWNED)
    return (state, tuple(sorted(local(c) for c in chips)), status.get("reason"),
            status.get("restarts"), status.get("attempt"), tuple(conditions))


def test_failure_policies_on_the_live_operator_as_in_the_embedded_api(
        op: Harness, tmp_path: Path) -> None:
    names = [f"{op.ns}-a", f"{op.ns}-b"]
    for name in names:
        op.ultraserver(name)
    # Every job exists before the operator starts: one cycle sees them all, as the embedded
    # API's first tick does (the 144-chip gang ranks by creation alone and goes first).
    for job in sorted(POLICY_JOBS, key=lambda j: j.order):
        op.job(job.name, job.chips, **{k: v for k, v in job.spec().items()
                                       if k not in ("chips", "priority")})
    op.start()
    for job in POLICY_JOBS:
        op.phase(job.name, "Admitted", timeout=60)
    api = EmbeddedDriver(tmp_path)
    try:
        api.step(0.0, Arrive(POLICY_JOBS))
        failed: dict[str, list[str]] = {}
        settled = {  # the decision written: replaced, restarted and placed again, failed
            "a": lambda s: s.get("reason") == "ChipReplaced",
            "b": lambda s: s.get("restarts") == 1 and s.get("phase") == "Admitted",
            "c": lambda s: s.get("phase") == "Failed"}
        for t, name in ((60.0, "a"), (120.0, "b"), (180.0, "c")):
            chip = target(op.get(name)["status"], 0)
            us, _, ref = chip.partition("/")
            failed.setdefault(us, []).append(ref)
            op.patch_ultraserver(us, {"failedChips": failed[us]})
            op.wait(f"{name}'s chip failure decided",
                    lambda name=name: settled[name](op.get(name)["status"]), 60)
            api.step(t, FailChip(name))
        live_local = dict(zip(names, "01", strict=True))
        api_local = {"gen2-0000": "0", "gen2-0001": "1"}

        def by_index(index: dict[str, str]) -> Callable[[str], str]:
            return lambda chip: f"{index[chip.partition('/')[0]]}/{chip.partition('/')[2]}"

        live = {j.name: _decided(op.get(j.name)["status"], by_index(live_local))
                for j in POLICY_JOBS}
        embedded = {n: _decided(s, by_index(api_local)) for n, s in api.statuses().items()}
    finally:
        api.close()
    assert live == embedded
    assert live["a"][2] == "ChipReplaced" and live["c"][:3] == ("failed", (), "ChipFailed")
