"""The failure policy of a running job: what a failure under it leads to, decided once.

Why a module of its own: a chip failing under a job and one of its pods failing are two
triggers with one rule, and the rule was written twice: the operator's pod data plane picked
among the three policies itself, with its own message, beside the core's rule for chips. Now
both triggers (`Admissions.chip_failed`, `Admissions.pods_failed`) end here, and only the words
differ (`Failure`: which reasons the decision carries).

The rules:
- `Fail` ends the job (`Failed`); its chips are free.
- `ReplaceAffected` (always an InferenceJob's, applied per replica) moves only what was hit:
  an affected gang keeps its placement with the lost chips swapped, or is placed afresh when it
  needs whole servers (a swapped chip could land on another job's server) or is one replica of
  several (`Replaced`). When no replacement fits, the job restarts whole and the message says
  why.
- `RestartAll` (and anything else) requeues the job whole, to resume from its checkpoint
  (`Restarted`; it keeps its rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.scheduling.decisions import Admitted, Failed, Replaced, Restarted
from ultraplane.scheduling.scheduler import Scheduler

__all__ = ["CHIP", "POD", "Failure", "apply_policy", "replace"]


@dataclass(frozen=True, slots=True)
class Failure:
    """What failed under a job, as its decision names it: `failed` is the reason of a failure
    or a restart, `replaced` the reason of a replacement."""

    failed: str
    replaced: str


CHIP = Failure("ChipFailed", "ChipReplaced")  # a chip of its placement failed
POD = Failure("PodFailed", "PodReplaced")  # one of its pods failed (the operator's pods)


def apply_policy(scheduler: Scheduler, allocator: Allocator, key: JobKey,
                 lost: Mapping[JobKey, Sequence[ChipId]], policy: str, message: str,
                 failure: Failure) -> Replaced | Restarted | Failed:
    """Apply `policy` to the running job `key`, which lost the chips `lost` (allocator key ->
    chips); `message` is the decision's sentence (a restart for want of a replacement adds
    why)."""
    if policy == "Fail":
        scheduler.cancel(key)
        return Failed(key, failure.failed, message)
    if policy == "ReplaceAffected":
        replaced = replace(scheduler, allocator, key, lost)
        if isinstance(replaced, Admitted):
            return Replaced(key, replaced.placements, replaced.replicated, failure.replaced,
                            message, tuple(c for part in lost.values() for c in part))
        message += f" No replacement: {replaced}"
    scheduler.requeue(key)
    return Restarted(key, failure.failed, message)


def replace(scheduler: Scheduler, allocator: Allocator, key: JobKey,
            lost: Mapping[JobKey, Sequence[ChipId]]) -> Admitted | str:
    """Replace the chips `lost` (allocator key -> chips) of a running job in place.

    A gang keeps its placement with the lost chips swapped, unless it needs whole servers or
    is one replica of several: then that gang is placed afresh. Returns the job's new
    placements, or why not (the caller restarts it then)."""
    job = scheduler.running().get(key)
    if job is None:
        return f"job {key} holds no chips"
    for part, chips in lost.items():
        why = ""
        if not job.request.whole_servers:
            swapped = allocator.replace(part, chips)
            if isinstance(swapped, Placement):
                continue
            if job.replicas is None:
                return swapped.message
            why = f"{swapped.message}; "
        allocator.release(part)
        fresh = allocator.allocate(part, job.request)
        if isinstance(fresh, NoFit):
            return why + fresh.message
    return Admitted(key, scheduler.placements(key), job.replicas is not None)
