"""SQL tables of the store: jobs of the embedded backend and the accounting records.

Accounting outlives the custom resources: a fleet operator asks months later
what ran where, for how long and with how much energy. Jobs are stored only by
the embedded backend (in Kubernetes mode the custom resources are the state).
The `XBase / X(table=True) / XPublic` family keeps the REST shapes apart from
the tables so a column can change without breaking the API.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from pydantic.alias_generators import to_camel
from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel


def wire_name(field: str) -> str:
    """camelCase as every other body; `energyKWh` as in the jobs' status."""
    return {"energy_kwh": "energyKWh"}.get(field, to_camel(field))


WIRE = ConfigDict(alias_generator=wire_name, populate_by_name=True)


class JobBase(SQLModel):
    kind: str = Field(index=True, description="TrainingJob or InferenceJob.")
    namespace: str = Field(index=True)
    name: str
    priority: int = 0
    chips: int = Field(default=0, description="Chips the job asks for (all replicas).")


class Job(JobBase, table=True):
    """A job of the embedded backend, kept so that state survives a restart."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("kind", "namespace", "name", name="uq_jobs_kind_ns_name"),)

    id: int | None = Field(default=None, primary_key=True)
    uid: str = Field(index=True, unique=True)
    seq: int = 0
    spec: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    status: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    allocated_chips: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_s: float = 0.0


class AccountingBase(SQLModel):
    job_uid: str = Field(index=True, unique=True)
    kind: str
    namespace: str = Field(index=True)
    name: str
    queue: str | None = Field(default=None, index=True,
                              description="The tenant queue whose quota the job used, if any.")
    chips: int = 0
    phase: str = "Pending"
    submitted_s: float | None = None
    started_s: float | None = None
    finished_s: float | None = None
    chip_hours: float = 0.0
    energy_kwh: float = 0.0
    completion_time_s: float | None = Field(
        default=None, description="Seconds from submission to the end (finished jobs only)."
    )


class AccountingCreate(AccountingBase):
    pass


class AccountingRecord(AccountingBase, table=True):
    """One row per job (by uid), updated while it runs and closed when it finishes."""

    __tablename__ = "accounting"

    id: int | None = Field(default=None, primary_key=True)


class AccountingPublic(AccountingBase):
    """One job's accounting as the API answers it (camelCase)."""

    model_config = WIRE  # type: ignore[assignment]


class DailyUsageBase(SQLModel):
    job_uid: str = Field(index=True)
    namespace: str = Field(index=True)
    day: str = Field(index=True, description="UTC day, YYYY-MM-DD.")
    chip_hours: float = 0.0
    energy_kwh: float = 0.0


class DailyUsage(DailyUsageBase, table=True):
    """Chip-hours and energy of one job on one UTC day (a long job spans several rows)."""

    __tablename__ = "daily_usage"
    __table_args__ = (UniqueConstraint("job_uid", "day", name="uq_daily_usage_job_day"),)

    id: int | None = Field(default=None, primary_key=True)


class KeyValue(SQLModel, table=True):
    """Small persistent facts of the embedded backend (simulated clock, job sequence)."""

    __tablename__ = "kv"

    key: str = Field(primary_key=True)
    value: str


class NamespaceUsage(SQLModel):
    model_config = WIRE  # type: ignore[assignment]

    namespace: str
    jobs: int
    finished_jobs: int
    chip_hours: float
    energy_kwh: float
    mean_completion_time_s: float | None


class QueueUsage(SQLModel):
    """One tenant queue's jobs and usage (sacct's accounts); `queue` None: jobs outside every
    quota."""

    model_config = WIRE  # type: ignore[assignment]

    queue: str | None
    jobs: int
    finished_jobs: int
    chip_hours: float
    energy_kwh: float
    mean_completion_time_s: float | None


class DayUsage(SQLModel):
    model_config = WIRE  # type: ignore[assignment]

    day: str
    namespace: str | None = None
    jobs: int
    chip_hours: float
    energy_kwh: float
