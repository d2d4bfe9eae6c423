"""The InferenceJob resource: replicas of a model server, each one gang (namespaced)."""

from __future__ import annotations

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

MAX_REPLICAS = 10_000
_ONE_LOAD = "spec.load needs exactly one of requestsPerSecond or tokensPerSecond"
_TOTAL = f"spec.replicas x spec.chipsPerReplica must be at most {MAX_JOB_CHIPS} chips"
_OVER_MAX = "spec.replicas must be at most spec.autoscaling.maxReplicas"
_LOAD_OR_AUTOSCALING = "spec.load is required unless spec.autoscaling is set"


class LoadTarget(SpecModel):
    """The offered load the replicas must serve."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.requestsPerSecond) != has(self.tokensPerSecond)",
                    "message": _ONE_LOAD,
                }
            ]
        }
    )

    requests_per_second: float | None = Field(
        default=None, gt=0, le=10_000_000, description="Requests per second to serve."
    )
    tokens_per_second: float | None = Field(
        default=None, gt=0, le=1_000_000_000, description="Output tokens per second to serve."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> LoadTarget:
        if (self.requests_per_second is None) == (self.tokens_per_second is None):
            raise ValueError(_ONE_LOAD)
        return self


class LatencySLO(SpecModel):
    """Latency objective; the simulator reports whether it is met (status.sloMet)."""

    time_to_first_token_ms: float | None = Field(
        default=None, gt=0, le=600_000, description="Target time to first token, ms."
    )
    time_per_output_token_ms: float | None = Field(
        default=None, gt=0, le=60_000, description="Target time per output token, ms."
    )


_MIN_MAX = "spec.autoscaling.minReplicas must be at most maxReplicas"


class LatencyObjective(SpecModel):
    """The p99, over the requests of a window, that the planner sizes the replicas for."""

    time_to_first_token_ms: float = Field(
        gt=0, le=600_000, description="p99 time to first token to hold, ms."
    )
    time_per_output_token_ms: float = Field(
        gt=0, le=60_000, description="p99 time per output token to hold, ms."
    )


class Autoscaling(SpecModel):
    """The core owns the replica count within [minReplicas, maxReplicas], sized to the
    objective for the observed load (`ultraplane.serving.planners`); status.desiredReplicas
    and status.scalingMessage say what it chose and why."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": _MIN_MAX},
            ]
        }
    )

    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, strict=True,
                              description="Fewest replicas, however low the load.")
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS, strict=True,
                              description="Most replicas, however high the load.")
    objective: LatencyObjective = Field(description="The latency objective (p99).")
    scale_down_delay_seconds: int = Field(
        default=300, ge=0, le=86_400, strict=True,
        description="How long a lower count must be wanted before replicas are removed "
        "(scale-ups are not delayed).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(_MIN_MAX)
        return self


class InferenceJobSpec(SpecModel):
    """What an inference job asks for: replicas x chipsPerReplica. Immutable once admitted,
    but for replicas (the `scale` subresource: `kubectl scale`, an HPA, KEDA)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *rules.fit_rules("chipsPerReplica"),
                {
                    "rule": f"self.replicas * self.chipsPerReplica <= {MAX_JOB_CHIPS}",
                    "message": _TOTAL,
                    "fieldPath": ".replicas",
                },
                {
                    "rule": "!has(self.autoscaling) || "
                    "self.replicas <= self.autoscaling.maxReplicas",
                    "message": _OVER_MAX,
                    "fieldPath": ".replicas",
                },
                {"rule": "has(self.load) || has(self.autoscaling)", "message": _LOAD_OR_AUTOSCALING},
            ]
        }
    )

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, strict=True,
                          description="Model replicas. May change while the job runs (the "
                          "scale subresource): added replicas are placed as new gangs, removed "
                          "ones are the highest-numbered, and the others keep their pods.")
    chips_per_replica: int = Field(
        ge=1, le=MAX_JOB_CHIPS, strict=True, description="Chips of one replica (one gang, all or nothing)."
    )
    profile: ProfileName | None = Field(
        default=None,
        description="Run only on UltraServers of this profile; unset means any profile.",
    )
    topology: TopologyPolicy = Field(
        default_factory=TopologyPolicy,
        description="Topology constraints of each replica (not of the replicas together).",
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
    model: ModelRef = Field(description="The model being served.")
    load: LoadTarget | None = Field(
        default=None, description="Offered load: requestsPerSecond or tokensPerSecond. Required "
        "without spec.autoscaling; with it, the load is read from the model servers' metrics.",
    )
    latency_slo: LatencySLO | None = Field(
        default=None, alias="latencySLO", description="Latency objective."
    )
    autoscaling: Autoscaling | None = Field(
        default=None, description="Let the core choose the replica count for the load; "
        "spec.replicas is then the count to start with. Unset: spec.replicas is fixed.",
    )
    duration_seconds: int | None = Field(
        default=None, ge=1, le=31_536_000,
        description="Serve for this long; unset means forever. Also the scheduler's predicted "
        "run time for the queue order (see TrainingJob spec.work.durationSeconds); unset counts "
        "as 24 h.",
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
    def _cross_field(self) -> InferenceJobSpec:
        rules.check_fit(self.chips_per_replica, "chipsPerReplica", self.profile, self.topology)
        if self.replicas * self.chips_per_replica > MAX_JOB_CHIPS:
            raise ValueError(_TOTAL)
        if self.autoscaling is not None and self.replicas > self.autoscaling.max_replicas:
            raise ValueError(_OVER_MAX)
        if self.load is None and self.autoscaling is None:
            raise ValueError(_LOAD_OR_AUTOSCALING)
        return self


class ReplicaAllocation(StatusModel):
    """Chips of one replica."""

    index: int = Field(ge=0, description="Replica index, from 0.")
    ultra_servers: list[str] = Field(default_factory=list, description="UltraServers used.")
    servers: list[str] = Field(default_factory=list, description="Servers, `<us>/sNN`.")
    chips: list[str] = Field(default_factory=list, description="Chip ids, `<us>/sNN/cNN`.")


class InferenceAllocation(Allocation):
    """Chips held by all replicas, and per replica."""

    replicas: list[ReplicaAllocation] = Field(
        default_factory=list, description="Chips of each replica."
    )


class ServingLoad(SpecModel):
    """The load the model servers reported over the planner's last interval (their vLLM
    metrics, read by the operator)."""

    requests_per_second: float | None = Field(default=None, ge=0,
                                              description="Requests finished per second.")
    prompt_tokens_per_request: float | None = Field(default=None, ge=0,
                                                    description="Mean prompt tokens.")
    output_tokens_per_request: float | None = Field(default=None, ge=0,
                                                    description="Mean output tokens.")
    ttft_p99_ms: float | None = Field(default=None, ge=0, alias="ttftP99Ms",
                                      description="p99 time to first token, ms.")
    tpot_p99_ms: float | None = Field(default=None, ge=0, alias="tpotP99Ms",
                                      description="p99 time per output token, ms.")
    slo_attainment: float | None = Field(
        default=None, ge=0, le=1,
        description="Share of requests within both p99 objectives of spec.autoscaling.")


class InferenceJobStatus(JobStatus):
    """Observed state of an inference job."""

    allocation: InferenceAllocation | None = Field(
        default=None, description="Chips held by the job."
    )
    replicas: int | None = Field(
        default=None, ge=0, description="Replicas placed (holding chips), what the scale "
        "subresource reports."
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Replicas whose pods all run (jobs with a template)."
    )
    selector: str | None = Field(
        default=None, max_length=1024, description="Label selector of the job's pods, for "
        "the scale subresource (an HPA finds the pods by it)."
    )
    chips: int | None = Field(
        default=None, ge=0, description="Chips of every replica together (replicas x "
        "chipsPerReplica): the job's size, as the Chips column shows it."
    )
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="Output tokens per second served (simulated)."
    )
    p50_latency_ms: float | None = Field(
        default=None, ge=0, description="Median time per output token, ms (simulated)."
    )
    slo_met: bool | None = Field(default=None, description="True when latencySLO is met.")
    desired_replicas: int | None = Field(
        default=None, ge=0, description="The replica count the core wants now (the planner's, "
        "with spec.autoscaling; else spec.replicas); replicas below it wait to be placed."
    )
    scaling_message: str | None = Field(
        default=None, description="Why the core chose desiredReplicas (the planner's reason), "
        "or why added replicas still wait."
    )
    tokens_per_megawatt: float | None = Field(
        default=None, ge=0, description="Tokens per second per megawatt drawn."
    )
    load: ServingLoad | None = Field(
        default=None, description="The load the model servers reported (spec.autoscaling)."
    )


class InferenceJob(BaseModel):
    """An inference job: replicas x chipsPerReplica, each replica one gang placed under the
    topology policy. Its spec is frozen once it leaves Pending, but for spec.replicas."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={"x-kubernetes-validations": [rules.immutable_spec_but_rule(
            [f.alias or n for n, f in InferenceJobSpec.model_fields.items()], "replicas")]},
    )

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["InferenceJob"] = "InferenceJob"
    metadata: ObjectMeta
    spec: InferenceJobSpec
    status: InferenceJobStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
