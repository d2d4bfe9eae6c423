"""TenantQueue objects to the core's `QueueSpec`, and the status document of each queue.

Why here: the operator (from TenantQueue objects), the embedded API (from the same objects
kept in its store) and the replay (`--queues FILE`) all read a queue's spec, and the operator
and the API both report a queue's usage; reading and reporting once keeps them alike, the way
`jobreads` and `jobstatuses` do for jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ultraplane.quotas import QueueSpec, QuotaBook
from ultraplane.resources.tenantqueues import TenantQueueSpec

__all__ = ["InvalidQueueError", "queue_spec", "queue_status"]


class InvalidQueueError(ValueError):
    """A queue spec the core cannot honour; the message names the queue and the field."""


def queue_spec(name: str, spec: Mapping[str, Any] | TenantQueueSpec) -> QueueSpec:
    """The core's `QueueSpec` of the queue `name` (wire-form spec or the model)."""
    try:
        model = spec if isinstance(spec, TenantQueueSpec) else TenantQueueSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise InvalidQueueError(f"queue {name}: {where}: {first['msg']}") from None
    try:
        return QueueSpec(
            name, dict(model.nominal), cohort=model.cohort,
            borrowing_limit=model.borrowing_limit, lending_limit=model.lending_limit,
            weight=model.weight, reclaim_within_cohort=model.reclaim_within_cohort.value,
            within_queue=model.within_queue.value, max_priority=model.max_priority,
            namespaces=tuple(model.namespaces) if model.namespaces is not None else None,
            default_for=tuple(model.default_for))
    except ValueError as exc:
        raise InvalidQueueError(str(exc)) from None


def queue_status(book: QuotaBook, name: str, *, pending: int, admitted: int,
                 generation: int | None = None) -> dict[str, Any]:
    """The status document (wire form) of queue `name` as `book` counts it now."""
    spec = book.queues.get(name)
    nominal = sum(spec.nominal.values()) if spec is not None else 0
    usage = {p: n for (q, p), n in sorted(book.usage.items()) if q == name and n}
    status: dict[str, Any] = {
        "nominalChips": nominal, "usedChips": book.used(name),
        "borrowedChips": book.borrowed(name) if spec is not None else 0,
        "usage": usage, "admittedJobs": admitted, "pendingJobs": pending,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status
