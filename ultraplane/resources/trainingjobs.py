"""The TrainingJob resource: one gang of chips that trains a model (namespaced)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ultraplane.resources import podtemplates, rules
from ultraplane.resources.commons import (
    MAX_JOB_CHIPS,
    MAX_PRIORITY,
    Allocation,
    ModelRef,
    Precision,
    ProfileName,
    SpecModel,
    StatusModel,
    TopologyPolicy,
)
from ultraplane.resources.jobs import JobStatus
from ultraplane.resources.metas import ObjectMeta

MAX_STEPS = 1_000_000_000
MAX_SECONDS = 31_536_000  # a year: longer is a typo


class FailurePolicy(StrEnum):
    """What to do when a chip of a running job fails."""

    RESTART_ALL = "RestartAll"
    REPLACE_AFFECTED = "ReplaceAffected"
    FAIL = "Fail"


class Work(SpecModel):
    """How much work the job does: steps of tokensPerStep tokens, or a fixed duration."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.steps) != has(self.durationSeconds)",
                    "message": "spec.work needs exactly one of steps (with tokensPerStep) or "
                    "durationSeconds",
                },
                {
                    "rule": "has(self.steps) == has(self.tokensPerStep)",
                    "message": "spec.work.steps and spec.work.tokensPerStep must be set together",
                },
            ]
        }
    )

    steps: int | None = Field(
        default=None, ge=1, le=MAX_STEPS, description="Training steps to run."
    )
    tokens_per_step: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Tokens per step (global batch)."
    )
    duration_seconds: int | None = Field(
        default=None, ge=1, le=MAX_SECONDS,
        description="Run for this long instead of steps. Also the scheduler's predicted run "
        "time: the job queues by its target start (creation + the operator's --queue-stretch "
        "times this) and may backfill before a reservation when it would end first. Without "
        "it the job counts as running 24 h.",
    )

    @model_validator(mode="after")
    def _one_kind_of_work(self) -> Work:
        if (self.steps is None) == (self.duration_seconds is None):
            raise ValueError(
                "spec.work needs exactly one of steps (with tokensPerStep) or durationSeconds"
            )
        if (self.steps is None) != (self.tokens_per_step is None):
            raise ValueError("spec.work.steps and spec.work.tokensPerStep must be set together")
        return self


_STEPS_NEED_SIZE = (
    "spec.work.steps needs spec.model.parametersBillions to estimate the time of a step"
)


class CheckpointNotice(SpecModel):
    """How the job saves when it is told to stop (a move to other chips)."""

    on_notice: bool = Field(
        default=False, strict=True,
        description="The job writes a checkpoint when its pods are told to stop (SIGTERM), "
        "within gracePeriodSeconds: a move then loses only that time, not the work since "
        "the last periodic checkpoint.",
    )
    grace_period_seconds: int = Field(
        default=120, ge=1, le=3600, strict=True,
        description="Seconds the pods get to save before they are killed (their termination "
        "grace period when the job is moved).",
    )


class TrainingJobSpec(SpecModel):
    """What a training job asks for. Immutable once the job is admitted."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *rules.fit_rules("chips"),
                {
                    "rule": "!has(self.work.steps) || "
                    "(has(self.model) && has(self.model.parametersBillions))",
                    "message": _STEPS_NEED_SIZE,
                    "fieldPath": ".model",
                },
            ]
        }
    )

    chips: int = Field(
        ge=1, le=MAX_JOB_CHIPS, strict=True, description="Chips for the whole gang (all or nothing)."
    )
    profile: ProfileName | None = Field(
        default=None,
        description="Run only on UltraServers of this profile; unset means any profile.",
    )
    topology: TopologyPolicy = Field(
        default_factory=TopologyPolicy,
        description="Topology constraints of the gang: requiredLevel (hard), preferredLevel "
        "(hint) and wholeServers.",
        json_schema_extra={"default": {}},
    )
    queue_name: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="The TenantQueue whose quota this job uses. None: its namespace's default "
        "queue, if one names it in spec.defaultFor; else the job is outside every quota.",
    )
    priority: int = Field(
        default=0,
        strict=True,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="Higher runs first and may preempt lower-priority jobs.",
    )
    preemptible: bool = Field(default=True, strict=True, description="False protects the job from preemption.")
    precision: Precision = Field(default=Precision.BF16, description="Numeric precision.")
    model: ModelRef | None = Field(default=None, description="The model being trained.")
    work: Work = Field(description="Steps and tokens per step, or a duration.")
    checkpoint_interval_seconds: int = Field(
        default=600,
        ge=0,
        le=86_400,
        description="Seconds between checkpoints; progress since the last one is lost on a "
        "restart. 0 turns checkpoints off.",
    )
    checkpoint: CheckpointNotice | None = Field(
        default=None,
        description="Whether the job saves a checkpoint on notice (onNotice, with "
        "gracePeriodSeconds). Unset: it saves only every checkpointIntervalSeconds.",
    )
    movable: bool | None = Field(
        default=None, strict=True,
        description="Whether the scheduler may move the running job to other chips to make "
        "room for a job within its team's unused quota (at most once an hour, and only when "
        "that job would otherwise wait long). Unset: when preemptible.",
    )
    failure_policy: FailurePolicy = Field(
        default=FailurePolicy.RESTART_ALL,
        description="On a chip failure: RestartAll from the last checkpoint, ReplaceAffected "
        "chips only, or Fail the job.",
    )

    template: dict[str, Any] | None = Field(
        default=None, description=podtemplates.DESCRIPTION
    )

    @field_validator("template")
    @classmethod
    def _template_rules(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            podtemplates.check_template(value)
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> TrainingJobSpec:
        rules.check_fit(self.chips, "chips", self.profile, self.topology)
        if self.work.steps is not None and (
            self.model is None or self.model.parameters_billions is None
        ):
            raise ValueError(_STEPS_NEED_SIZE)
        return self


class Progress(StatusModel):
    """Progress of a step-based job (written by the simulator)."""

    completed_steps: int = Field(default=0, ge=0, description="Steps done.")
    checkpointed_steps: int = Field(default=0, ge=0, description="Steps safe in a checkpoint.")
    percent: float = Field(default=0, ge=0, le=100, description="Work done, 0..100.")


class TrainingJobStatus(JobStatus):
    """Observed state of a training job."""

    allocation: Allocation | None = Field(default=None, description="Chips held by the job.")
    progress: Progress | None = Field(default=None, description="Step progress.")


class TrainingJob(BaseModel):
    """A training job: one gang of chips, placed all or nothing under a topology policy.
    Its spec is frozen once it leaves Pending."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={"x-kubernetes-validations": [rules.immutable_spec_rule()]},
    )

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
