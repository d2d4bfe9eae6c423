"""Writing the core's moves so that no chip is ever in two jobs' recorded allocations.

Why a module of its own: a move (`Moved`) gives a running job new chips and hands its old ones
to the job it made room for, in one cycle. After a restart chips count as taken only where a
job's status says so, so the writes must keep the records apart at every moment:
- a moved job's status (its new allocation) is written before the admission that takes its
  old chips, as an eviction's is (`statuses.EVICTIONS`);
- a moved job whose new chips are still on another job's record (a chain of moves: it goes
  where another moved job was) is written only once that job's record says it left them;
- an admission whose chips are still on another job's record (a move's write did not land)
  is not written this cycle: it waits and is decided again.
The pods follow the records (`pods.PodPlane`): the moved job's old pods are deleted with its
checkpoint grace period (`stop_grace`), and no pod starts on a chip a live pod still holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ultraplane.operator.jobviews import HOLDING_PHASES

from ultraplane.ids import ChipId, JobKey

__all__ = ["clashes", "recorded_holders", "stop_grace"]


def recorded_holders(bodies: Mapping[JobKey, Mapping[str, Any]]) -> dict[ChipId, JobKey]:
    """Chip -> the job whose status records it (jobs in a phase that holds chips)."""
    out: dict[ChipId, JobKey] = {}
    for key, body in bodies.items():
        status = body.get("status") or {}
        if status.get("phase") not in HOLDING_PHASES:
            continue
        for chip in (status.get("allocation") or {}).get("chips") or ():
            out[ChipId(str(chip))] = key
    return out


def clashes(key: JobKey, chips: Iterable[ChipId],
            holders: Mapping[ChipId, JobKey]) -> JobKey | None:
    """Another job whose record still holds one of `chips` (None: none does)."""
    for chip in chips:
        holder = holders.get(chip)
        if holder is not None and holder != key and not holder.startswith(f"{key}#"):
            return holder
    return None


def stop_grace(spec: Mapping[str, Any]) -> int | None:
    """Seconds a job's live pods get when they are stopped while the job goes on (a move, an
    eviction): `spec.checkpoint.gracePeriodSeconds` when the job says how long it saves
    (120 s when it only says it saves on notice), else None (the pod's own grace period)."""
    checkpoint = spec.get("checkpoint")
    if not isinstance(checkpoint, Mapping):
        return None
    grace = checkpoint.get("gracePeriodSeconds")
    if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0:
        return grace
    return 120 if checkpoint.get("onNotice") is True else None
