"""The status fields both job kinds share, and their ownership.

The operator owns the admission fields (phase Pending/Admitted/Preempted, queue position,
allocation, attempt); the simulator owns the running fields (Running/Succeeded/Failed,
times, progress, power). Both write through the status subresource, so users cannot.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from ultraplane.resources.commons import (
    CONDITIONS_LIST,
    MESSAGE_MAX,
    Condition,
    Phase,
    StatusModel,
)


class JobStatus(StatusModel):
    """Observed state of a job."""

    phase: Phase | None = Field(
        default=None,
        description="Pending, Admitted or Preempted (operator); Running, Succeeded or Failed "
        "(the simulator, or the operator from the pods of a job with a template; the operator "
        "also writes Failed for a job that can never fit).",
    )
    queue_position: int | None = Field(
        default=None, ge=0, description="Place in the admission queue while Pending (1 = next)."
    )
    reason: str | None = Field(
        default=None, max_length=1024, description="One CamelCase word, e.g. NoCapacity."
    )
    message: str | None = Field(
        default=None, max_length=MESSAGE_MAX, description="Why the job is in this phase."
    )
    admitted_time: datetime | None = Field(
        default=None, description="When the current allocation was made."
    )
    attempt: int | None = Field(
        default=None, ge=0, description="Allocations so far; each new allocation adds one."
    )
    preemptions: int | None = Field(
        default=None, ge=0, description="Times a higher-priority job took the chips."
    )
    restarts: int | None = Field(default=None, ge=0, description="Restarts after chip failures.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Admitted, Running, Finished, Preempted.",
        json_schema_extra=CONDITIONS_LIST,
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the operator last acted on."
    )
    start_time: datetime | None = Field(default=None, description="When the job started running.")
    completion_time: datetime | None = Field(
        default=None, description="When the job succeeded or failed."
    )
    progress_percent: float | None = Field(
        default=None, ge=0, le=100, description="Work done, 0..100."
    )
    utilization: float | None = Field(
        default=None, ge=0, le=1, description="Mean busy fraction of the job's chips, 0..1."
    )
    power_watts: float | None = Field(
        default=None, ge=0, description="Power draw of the job's chips in watts."
    )
    power_cap_watts: float | None = Field(
        default=None, ge=0,
        description="Per-chip power cap a PowerBudget set on the job's chips (absent: not "
        "capped); the job runs slower while it holds.",
    )
    capped_since: datetime | None = Field(
        default=None, description="When the job's current power cap began (absent: not capped)."
    )
    energy_kwh: float | None = Field(
        default=None, ge=0, alias="energyKWh", description="Energy used so far, in kWh."
    )
    chip_hours: float | None = Field(
        default=None, ge=0,
        description="Chip-hours used so far, over every attempt, on the same clock as energyKWh "
        "(simulated time under the simulator).",
    )
