"""The embedded backend's record of one job, and its round trip through the `jobs` table.

Kept apart from the backend so the restart path (row -> state) and the save
path (state -> row) sit side by side and cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from ultraplane.api.backends import JobSpec
from ultraplane.api.schemas import JobKind, JobResource, ObjectMeta
from ultraplane.api.store.tables import Job

from ultraplane.documents.conversions import TERMINAL_PHASES, InvalidJobError
from ultraplane.documents.jobspecs import JobRead, read_job
from ultraplane.ids import JobKey, job_key
from ultraplane.placement.allocator import PlacementRequest
from ultraplane.resources import InferenceJobSpec, TrainingJobSpec
from ultraplane.workloads import QueuedJob


def rfc3339(t_s: float | None) -> str | None:
    if t_s is None:
        return None
    return datetime.fromtimestamp(t_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class JobState:
    uid: str
    kind: JobKind
    namespace: str
    name: str
    spec: JobSpec
    seq: int
    created_s: float
    labels: dict[str, str] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=lambda: {"phase": "Pending"})
    # scheduler key -> chips it holds (one key per training job, one per inference replica)
    held: dict[str, list[str]] = field(default_factory=dict)
    started_s: float | None = None
    finished_s: float | None = None
    last_sample_s: float | None = None
    # The runtime's energy figure for this key, as last seen by this process: it grows across
    # attempts of one runtime and restarts at zero in a new process, so usage adds deltas.
    rt_energy_seen_kwh: float = 0.0
    checkpointed_steps: int = 0
    days: dict[str, list[float]] = field(default_factory=dict)  # day -> [chip-hours, kWh]
    dirty: bool = True

    @property
    def key(self) -> JobKey:
        return job_key(self.kind, self.namespace, self.name)

    @cached_property
    def requests(self) -> list[PlacementRequest]:
        """One gang request per training job, one per inference replica (the core's reading;
        read again when the spec changes, `respec`)."""
        return [self.queued.request for _ in self.read.parts]

    @cached_property
    def spec_wire(self) -> dict[str, Any]:
        """The spec as the wire and the row have it, dumped once (until `respec`): saving
        every running job dumped each spec again under the fleet lock."""
        return self.spec.model_dump(mode="json", by_alias=True, exclude_none=True)

    def respec(self, spec: JobSpec) -> None:
        """A new spec (an InferenceJob's replicas, the one field that changes): what was read
        from the old one is read again."""
        self.spec = spec
        for derived in ("requests", "spec_wire", "read", "priority", "preemptible"):
            self.__dict__.pop(derived, None)

    def snapshot(self) -> JobState:
        """A copy that later changes to this job do not reach (status, chips and usage
        copied; the spec and what is read from it shared), to be saved outside the lock."""
        copy = object.__new__(JobState)  # no __init__: a thousand of these under the lock
        copy.__dict__.update(self.__dict__)
        copy.status = dict(self.status)
        copy.held = {k: list(v) for k, v in self.held.items()}
        copy.days = {d: list(v) for d, v in self.days.items()}
        return copy

    @cached_property
    def read(self) -> JobRead:
        """The core's one reading of the job (key, queue entry, failure policy, parts)."""
        return read_job(self.kind, self.namespace, self.name, self.spec, seq=self.seq,
                        created_s=self.created_s)

    @property
    def queued(self) -> QueuedJob:
        """The job's queue entry: one gang, or (InferenceJob) one per replica, admitted whole."""
        if self.read.queued is None:
            raise InvalidJobError(self.read.error or "invalid spec")
        return self.read.queued

    @property
    def sched_keys(self) -> list[JobKey]:
        """The allocator keys holding its chips (`<key>#i` per replica of an InferenceJob)."""
        return list(self.queued.parts())

    @property
    def chips(self) -> int:
        return self.read.size

    @cached_property
    def priority(self) -> int:
        return self.read.priority

    @cached_property
    def preemptible(self) -> bool:
        return self.read.preemptible

    @property
    def phase(self) -> str:
        return str(self.status.get("phase", "Pending"))

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def running(self) -> bool:
        return self.phase == "Running"

    @property
    def chip_hours(self) -> float:
        return sum(v[0] for v in self.days.values())

    @property
    def energy_kwh(self) -> float:
        return sum(v[1] for v in self.days.values())

    def add_usage(self, day: str, chip_hours: float, energy_kwh: float) -> None:
        bucket = self.days.setdefault(day, [0.0, 0.0])
        bucket[0] += chip_hours
        bucket[1] += energy_kwh

    def resource(self) -> JobResource:
        return JobResource(
            kind=self.kind,
            metadata=ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                uid=self.uid,
                creation_timestamp=rfc3339(self.created_s),
                labels=self.labels,
            ),
            spec=self.spec_wire,
            # an InferenceJob's size, every replica together, as the CRD's Chips column shows it
            status=self.status if self.kind == "TrainingJob" else {**self.status,
                                                                   "chips": self.chips},
        )

    def to_row(self, row: Job | None = None) -> Job:
        values = self.to_values()
        if row is None:
            return Job(**values)
        for name, value in values.items():
            setattr(row, name, value)
        return row

    def to_values(self) -> dict[str, Any]:
        """The `jobs` row as plain values (what the batched upsert writes)."""
        internal = {
            "labels": self.labels,
            "held": self.held,
            "startedS": self.started_s,
            "finishedS": self.finished_s,
            "lastSampleS": self.last_sample_s,
            "checkpointedSteps": self.checkpointed_steps,
            "days": self.days,
        }
        values = {
            "uid": self.uid,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "priority": self.priority,
            "chips": self.chips,
            "seq": self.seq,
            "spec": self.spec_wire,
            "status": {"status": self.status, "internal": internal},
            "allocated_chips": sorted(c for chips in self.held.values() for c in chips),
            "created_s": self.created_s,
        }
        return values

    @classmethod
    def from_row(cls, row: Job) -> JobState:
        model = TrainingJobSpec if row.kind == "TrainingJob" else InferenceJobSpec
        kind: JobKind = "TrainingJob" if row.kind == "TrainingJob" else "InferenceJob"
        internal = dict(row.status.get("internal", {}))
        return cls(
            uid=row.uid,
            kind=kind,
            namespace=row.namespace,
            name=row.name,
            spec=model.model_validate(row.spec),
            seq=row.seq,
            created_s=row.created_s,
            labels=dict(internal.get("labels", {})),
            status=dict(row.status.get("status", {"phase": "Pending"})),
            held={k: list(v) for k, v in internal.get("held", {}).items()},
            started_s=internal.get("startedS"),
            finished_s=internal.get("finishedS"),
            last_sample_s=internal.get("lastSampleS"),
            checkpointed_steps=int(internal.get("checkpointedSteps", 0)),
            days={d: [float(v[0]), float(v[1])] for d, v in internal.get("days", {}).items()},
            dirty=False,
        )
