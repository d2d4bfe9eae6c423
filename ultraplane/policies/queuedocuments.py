"""A TenantQueue's documents: its spec read into the core's `QueueSpec` (defined with the
`QuotaBook` that enforces it, `ultraplane.policies.quotas`), and its status written back.

Why here: the operator (from TenantQueue objects), the embedded API (`serve --queues FILE`,
the same objects kept in its store) and the replay (`simulate --queues FILE`) all read a
queue's spec through `queue_spec`, against the resource's own model, and the operator and the
API both report a queue's usage; reading and reporting once keeps them alike, the way
`jobspecs` and `jobstatuses` do for jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ultraplane.policies.cohortdocuments import is_cohort_entry
from ultraplane.policies.fairshares import queue_fair_shares
from ultraplane.policies.policyfiles import named_specs, read_documents
from ultraplane.policies.quotas import (
    QueueRefusal,
    QueueSpec,
    QuotaBook,
    default_queues,
    queue_refusal,
)
from ultraplane.resources.commons import problem_of
from ultraplane.resources.tenantqueues import TenantQueueSpec
from ultraplane.workloads import QueuedJob

__all__ = ["InvalidQueueError", "queue_file", "queue_spec", "queue_specs", "queue_status",
           "queue_statuses", "queue_wire", "refusal_at_create", "resolve_queue"]


class InvalidQueueError(ValueError):
    """A queue spec the core cannot honour; the message names the queue and the field."""


def queue_spec(name: str, spec: Mapping[str, Any] | TenantQueueSpec) -> QueueSpec:
    """The core's `QueueSpec` of the queue `name` (wire-form spec or the model)."""
    try:
        model = spec if isinstance(spec, TenantQueueSpec) else TenantQueueSpec.model_validate(spec)
    except ValidationError as exc:
        raise InvalidQueueError(f"queue {name}: {problem_of(exc)}") from None
    try:
        return QueueSpec(
            name, dict(model.nominal), cohort=model.cohort,
            borrowing_limit=model.borrowing_limit, lending_limit=model.lending_limit,
            weight=model.weight, reclaim_within_cohort=model.reclaim_within_cohort.value,
            within_queue=model.within_queue.value, max_priority=model.max_priority,
            fair_preemption=model.fair_sharing.preemption_strategy.value,
            fair_preemption_interval_s=float(model.fair_sharing.preemption_interval_seconds),
            namespaces=tuple(model.namespaces) if model.namespaces is not None else None,
            default_for=tuple(model.default_for))
    except ValueError as exc:
        raise InvalidQueueError(str(exc)) from None


def queue_statuses(book: QuotaBook, queued: Iterable[QueuedJob], running: Iterable[QueuedJob],
                   generations: Mapping[str, int | None] | None = None,
                   names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The status document of every queue (of `names`, by default the book's): what the book
    counts, and how many of the `queued` and `running` jobs use each queue."""
    pending: dict[str | None, int] = {}
    queued = list(queued)
    shares = queue_fair_shares(book, queued)
    for job in queued:
        queue = book.queue_of(job)
        pending[queue] = pending.get(queue, 0) + 1
    admitted: dict[str | None, int] = {}
    for job in running:
        queue = book.queue_of(job)
        admitted[queue] = admitted.get(queue, 0) + 1
    return {name: queue_status(book, name, pending=pending.get(name, 0),
                               admitted=admitted.get(name, 0),
                               generation=(generations or {}).get(name),
                               fair_share=shares.get(name))
            for name in sorted(book.queues if names is None else names)}


def queue_status(book: QuotaBook, name: str, *, pending: int, admitted: int,
                 generation: int | None = None, fair_share: float | None = None
                 ) -> dict[str, Any]:
    """The status document (wire form) of queue `name` as `book` counts it now, with its
    `fair_share` of chips when it has one (a queue of a cohort)."""
    spec = book.queues.get(name)
    nominal = sum(spec.nominal.values()) if spec is not None else 0
    usage = {p: n for (q, p), n in sorted(book.usage.items()) if q == name and n}
    status: dict[str, Any] = {
        "nominalChips": nominal, "usedChips": book.used(name),
        "borrowedChips": book.borrowed(name) if spec is not None else 0,
        "usage": usage, "admittedJobs": admitted, "pendingJobs": pending,
    }
    if fair_share is not None:
        status["fairShareChips"] = round(fair_share)
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def queue_specs(data: Any) -> list[QueueSpec]:
    """The queues of a `--queues` file (`ultraplane simulate`, `ultraplane serve`): a list of
    entries, each a `name` and the fields of a TenantQueue's spec, or TenantQueue objects
    (`policyfiles`); InvalidQueueError names the entry and the field. Its cohorts
    (TenantCohort entries) are `cohortdocuments.cohort_specs`'."""
    if not isinstance(data, list):
        raise InvalidQueueError("the queues must be a YAML list, each entry a name and the "
                                "fields of a TenantQueue spec")
    data = [entry for entry in data if not is_cohort_entry(entry)]
    specs: list[QueueSpec] = []
    for name, fields in named_specs(data, "TenantQueue", "queue", InvalidQueueError):
        nominal = fields.get("nominal")
        if isinstance(nominal, int) and not isinstance(nominal, bool):
            # the simulator's old file format: chips on every profile of the fleet
            raise InvalidQueueError(
                f"queue {name}: nominal must map each hardware profile to its chips, as a "
                f"TenantQueue's spec does (e.g. nominal: {{trn3-gen2: {nominal}}}); a bare "
                "number of chips is no longer read")
        specs.append(queue_spec(name, fields))
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidQueueError(f"queue {twice[0]} is listed twice")
    return specs


def queue_file(path: str | Path) -> list[QueueSpec]:
    """The queues of the file `path` (`queue_specs`); ValueError with one sentence, naming the
    file."""
    data = read_documents(path)
    try:
        return queue_specs(data)
    except InvalidQueueError as exc:
        raise InvalidQueueError(f"{path}: {exc}") from None


def resolve_queue(queues: Mapping[str, QueueSpec], namespace: str,
                  queue: str | None) -> str | None:
    """The queue a job of `namespace` uses: the one it names, else its namespace's default
    (`quotas.default_queues`, as `QuotaBook` picks it), else none."""
    return queue if queue is not None else default_queues(queues.values()).get(namespace)


def refusal_at_create(queues: Mapping[str, QueueSpec], namespace: str, queue: str | None,
                      priority: int) -> QueueRefusal | None:
    """Why a job of `namespace` naming `queue` (None: its namespace's default) at `priority`
    may not be created, or None: the check an API runs before it accepts a job, with the
    rules the core's cycle applies (`quotas.queue_refusal`)."""
    queue = resolve_queue(queues, namespace, queue)
    return None if queue is None else queue_refusal(queues, queue, namespace, priority)


def queue_wire(spec: QueueSpec) -> dict[str, Any]:
    """A `QueueSpec` as the wire form of a TenantQueue's spec (unset fields left out)."""
    wire: dict[str, Any] = {
        "nominal": dict(spec.nominal), "cohort": spec.cohort,
        "borrowingLimit": spec.borrowing_limit, "lendingLimit": spec.lending_limit,
        "weight": spec.weight, "reclaimWithinCohort": spec.reclaim_within_cohort,
        "withinQueue": spec.within_queue, "maxPriority": spec.max_priority,
        "namespaces": list(spec.namespaces) if spec.namespaces is not None else None,
        "defaultFor": list(spec.default_for),
        "fairSharing": {"preemptionStrategy": spec.fair_preemption,
                        "preemptionIntervalSeconds": int(spec.fair_preemption_interval_s)}}
    return {k: v for k, v in wire.items() if v is not None}
