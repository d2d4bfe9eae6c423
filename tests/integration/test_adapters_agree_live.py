"""The cross-adapter scenario of tests/unit/test_adapters_agree.py with the operator on a real
API server: the live operator decides what the embedded REST backend and the trace replay
decide (UltraServer names differ, so chips are compared by UltraServer index).

    block-000
    +-- <ns>-a [144 chips]   (gen2-0000 in the other adapters)
    +-- <ns>-b [144 chips]   (gen2-0001)
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.operator_harness import Harness
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
