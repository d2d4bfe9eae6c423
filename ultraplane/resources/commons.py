"""Types shared by the three custom resources: enums, conditions, topology policy, allocation.

Field names are the contract of `docs/resources.md`: the operator, the simulator and
the REST API read and write these shapes, and the CRD schemas are generated from them.
Python attributes are snake_case; the wire names (aliases) are the camelCase of the
contract, so always dump with `by_alias=True` (see `to_wire`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ultraplane.hardware.profiles import (
    Precision as Precision,  # defined once, with the hardware figures it picks
)

GROUP = "ultraplane.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Bounds that keep the CEL cost estimate finite and objects well under etcd's 1.5 MiB.
NAME_MAX = 253
MESSAGE_MAX = 32768
MAX_JOB_CHIPS = 1_048_576  # "up to 1M Trainium3 chips" per cluster (launch press)
MAX_PRIORITY = 1_000_000


def cel_map(values: dict[str, int], *, as_text: bool = False) -> str:
    """A CEL map literal, so generation-time tables (levels, profile sizes) live in the rules.

    `as_text` gives string values for messageExpressions: the API server's cost estimate
    treats `string(int)` as unbounded and rejects the CRD, while a string literal is bounded.
    """
    body = ", ".join(f"'{k}': '{v}'" if as_text else f"'{k}': {v}" for k, v in values.items())
    return "{" + body + "}"


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_takes_bool(a) for a in get_args(annotation))


class SpecModel(BaseModel):
    """Base of spec models: unknown fields are an error, so a typo never goes unnoticed; and
    `true`/`false` is no number (pydantic's lax mode reads them as 1 and 0: schemathesis sent
    `"checkpointIntervalSeconds": false` and the job was created with 0, where the CRD's
    schema refuses a boolean)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and not _takes_bool(field.annotation):
                raise ValueError(f"must not be a boolean ({str(value).lower()})")
        return value


class StatusModel(BaseModel):
    """Base of status models: tolerant readers, since several components write status."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def problem_of(exc: ValidationError) -> str:
    """The first problem of a validation error as `field.path: what is wrong`."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "spec"
    return f"{where}: {first['msg']}"


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The JSON body Kubernetes expects: camelCase names, unset optionals left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class ProfileName(StrEnum):
    """A hardware profile of `ultraplane.hardware.profiles`."""

    TRN2 = "trn2"
    TRN3_GEN1 = "trn3-gen1"
    TRN3_GEN2 = "trn3-gen2"
    TRN4_PROJECTED = "trn4-projected"


class Level(StrEnum):
    """A topology level, nearest first; `block` is an alias of `network-1`."""

    SERVER = "server"
    RACK = "rack"
    ULTRASERVER = "ultraserver"
    NETWORK_1 = "network-1"
    BLOCK = "block"
    NETWORK_2 = "network-2"
    NETWORK_3 = "network-3"
    NETWORK_4 = "network-4"
    CLUSTER = "cluster"


# Distance of each level; an alias shares the rank of what it names.
LEVEL_RANK: dict[str, int] = {
    "server": 0,
    "rack": 1,
    "ultraserver": 2,
    "network-1": 3,
    "block": 3,
    "network-2": 4,
    "network-3": 5,
    "network-4": 6,
    "cluster": 7,
}


class TopologyMode(StrEnum):
    """Whether a gang that fits in one UltraServer may be split across several."""

    LOCAL = "Local"
    SPLIT_WHEN_IT_PAYS = "SplitWhenItPays"
    UNCONSTRAINED = "Unconstrained"


class Phase(StrEnum):
    """Lifecycle phase. The operator writes Pending/Admitted/Preempted (and Failed for a job
    that can never fit); the simulator writes Running/Succeeded/Failed."""

    PENDING = "Pending"
    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    """Whether a condition holds."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StatusModel):
    """One observation of the object's state, in the shape of Kubernetes' metav1.Condition.
    Types used: Admitted, Running, Finished, Preempted."""

    type: str = Field(max_length=316, description="Condition type, e.g. Admitted or Running.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(
        default=None, max_length=1024, description="One CamelCase word saying why, e.g. NoCapacity."
    )
    message: str | None = Field(
        default=None, max_length=MESSAGE_MAX, description="A sentence for a person."
    )
    last_transition_time: datetime | None = Field(
        default=None, description="When the status last changed."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed from."
    )


CONDITIONS_LIST: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


class ModelRef(SpecModel):
    """The model a job trains or serves; its size drives the simulated step time."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Model name, e.g. llama-70b.")
    parameters_billions: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="Parameter count in billions; needed to estimate the time of a training step.",
    )


class TopologyPolicy(SpecModel):
    """Where the chips of one gang may sit. A required level is a hard constraint (all chips
    inside one domain of that level); a preferred level is a scoring hint."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.requiredLevel) || !has(self.preferredLevel) || "
                    f"{cel_map(LEVEL_RANK)}[self.preferredLevel] <= "
                    f"{cel_map(LEVEL_RANK)}[self.requiredLevel]",
                    "message": "topology.preferredLevel must be at or nearer than "
                    "topology.requiredLevel (server < rack < ultraserver < network-1..4 < cluster)",
                    "fieldPath": ".preferredLevel",
                }
            ]
        }
    )
    required_level: Level | None = Field(
        default=None,
        description="All chips must sit inside one domain of this level (server, rack, "
        "ultraserver, network-1 alias block, network-2..4, cluster). Unset: a gang that fits in "
        "one UltraServer stays inside one NeuronSwitch domain (see mode); a larger gang takes "
        "whole UltraServers in the nearest network domain that has them. A level above "
        "ultraserver opts a gang that fits in one UltraServer in to spanning (mode "
        "Unconstrained unless mode says otherwise).",
    )
    mode: TopologyMode | None = Field(
        default=None,
        description="Whether a gang that fits in one UltraServer may be split across "
        "UltraServers (only such gangs are affected). Local: never; it waits for one "
        "UltraServer, whose NeuronSwitch all-to-all makes its collectives fast. "
        "SplitWhenItPays: split (within requiredLevel) only when the predicted slowdown of the "
        "split, from the profile's bandwidth per level, costs less time than the predicted "
        "wait for one UltraServer, from running jobs' expected end times; the numbers are in "
        "the job's status message. Unconstrained: spread whenever no single UltraServer has "
        "room. Unset: Unconstrained if requiredLevel is above ultraserver, else Local.",
    )
    preferred_level: Level | None = Field(
        default=None,
        description="Try to pack the chips inside one domain of this level; never fails a job.",
    )
    whole_servers: bool = Field(
        default=False,
        strict=True,
        description="Take only whole servers (no other job shares them); with a profile, the "
        "chip count must then be a multiple of the server size.",
    )

    @model_validator(mode="after")
    def _preferred_not_farther(self) -> TopologyPolicy:
        req, pref = self.required_level, self.preferred_level
        if req is not None and pref is not None and LEVEL_RANK[pref] > LEVEL_RANK[req]:
            raise ValueError(
                "topology.preferredLevel must be at or nearer than topology.requiredLevel "
                "(server < rack < ultraserver < network-1..4 < cluster)"
            )
        return self


class Allocation(StatusModel):
    """Chips the operator reserved for the job (written by the operator)."""

    ultra_servers: list[str] = Field(
        default_factory=list, description="UltraServers holding the job's chips."
    )
    servers: list[str] = Field(
        default_factory=list, description="Servers holding the chips, as `<ultraserver>/sNN`."
    )
    chips: list[str] = Field(
        default_factory=list, description="Chip ids, as `<ultraserver>/sNN/cNN`."
    )
    # A plain string, not `Level`: the allocator may report any network-N, and a status
    # write must never fail on a level the spec could not have asked for.
    level: str | None = Field(
        default=None,
        max_length=32,
        description="Tightest topology level that contains every chip (server, rack, "
        "ultraserver, network-N or cluster).",
    )
    score: float | None = Field(
        default=None, description="Placement score of the allocator (higher is tighter)."
    )
