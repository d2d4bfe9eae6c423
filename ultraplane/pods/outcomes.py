"""What a job's pods say about the job: still launching, running, succeeded, or failed where.

Why pure and separate: the rules (when a job counts as Running, which pod's success ends a
training job, what counts as a failure) are what a user reads in docs/operator.md and what the
failure policy acts on, so they are a table-tested function of pod states, not scattered through
watch handlers.

The rules, for the pods of the job's current attempt (`launches.Launch`):
  - a pod that is `Failed`, `Unknown`, or gone without the operator deleting it (force-deleted,
    its Node deleted) is a failure of its server; a failure decides before anything else, except
    that a training job whose rank 0 already succeeded has succeeded;
  - a TrainingJob succeeds when the rank-0 pod succeeds (the launcher's rank 0 exits last in
    torchrun-style programs; the other pods are then stopped); an InferenceJob when every pod of
    every replica succeeded;
  - the job runs when every pod exists and is `Running` or `Succeeded`;
  - otherwise it is still launching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ultraplane.ids import ServerId

FAILED_PHASES = frozenset({"Failed", "Unknown"})


@dataclass(frozen=True)
class PodState:
    """What the operator knows of one pod of the launch; `vanished`: deleted by someone else."""

    phase: str = ""  # Pending | Running | Succeeded | Failed | Unknown ("" not seen yet)
    exists: bool = False
    vanished: bool = False
    message: str = ""


@dataclass(frozen=True)
class Outcome:
    """`kind` is launching | running | succeeded | failed; `servers` the failed servers."""

    kind: str
    message: str = ""
    servers: tuple[ServerId, ...] = ()
    groups: tuple[int, ...] = ()


def outcome(kind: str, slots: Mapping[tuple[int, int], tuple[ServerId, PodState]]) -> Outcome:
    """The job's state from its pods, by (group, rank)."""
    if not slots:
        return Outcome("launching")
    rank0 = slots.get((0, 0))
    if kind == "TrainingJob" and rank0 is not None and rank0[1].phase == "Succeeded":
        return Outcome("succeeded", "rank 0 succeeded")
    failed = sorted((slot, server, state) for slot, (server, state) in slots.items()
                    if state.vanished or state.phase in FAILED_PHASES)
    if failed:
        parts = []
        for (group, rank), server, state in failed:
            what = "was deleted" if state.vanished else f"is {state.phase}"
            where = f"rank {rank}" if kind == "TrainingJob" else f"replica {group} rank {rank}"
            parts.append(f"pod of {where} on {server} {what}"
                         + (f": {state.message}" if state.message else ""))
        return Outcome("failed", "; ".join(parts), tuple(dict.fromkeys(s for _, s, _ in failed)),
                       tuple(dict.fromkeys(slot[0] for slot, _, _ in failed)))
    states = [state for _, state in slots.values()]
    if all(s.phase == "Succeeded" for s in states):
        return Outcome("succeeded", "every pod succeeded")
    if all(s.exists and s.phase in ("Running", "Succeeded") for s in states):
        return Outcome("running", f"{len(states)} pod(s) running")
    return Outcome("launching")
