"""The UltraServer resource: one NeuronSwitch domain of the fleet (cluster-scoped).

The spec is what a fleet operator declares (profile, where it sits in the EFA network,
which chips are broken); the status is what the operator and the simulator observe.
Chip refs are local to the UltraServer (`s03/c01`, zero-based) so a manifest can be
copied between UltraServers unchanged.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ultraplane.resources import bounds
from ultraplane.resources.commons import (
    CONDITIONS_LIST,
    NAME_MAX,
    Condition,
    ProfileName,
    SpecModel,
    StatusModel,
)
from ultraplane.resources.metas import ObjectMeta

CHIP_REF_PATTERN = r"^s\d{2}/c\d{2}$"
_ChipRef = Annotated[str, Field(pattern=CHIP_REF_PATTERN, max_length=7)]
_Label = Annotated[str, Field(min_length=1, max_length=63)]


class DrainPolicy(StrEnum):
    """What happens to running jobs when the UltraServer is made unschedulable."""

    WAIT = "Wait"
    REQUEUE = "Requeue"


_SERVERS = "(has(self.servers) ? self.servers : " + bounds.cel_servers() + "[self.profile])"


class UltraServerSpec(SpecModel):
    """Desired state of one UltraServer, declared by the fleet operator."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.servers) || self.servers <= "
                    f"{bounds.cel_servers()}[self.profile]",
                    "messageExpression": "'spec.servers exceeds the ' + "
                    + bounds.cel_servers(as_text=True)
                    + "[self.profile] + ' servers of an UltraServer of profile ' + self.profile",
                    "fieldPath": ".servers",
                },
                {
                    "rule": "!has(self.failedChips) || self.failedChips.all(c, "
                    f"int(c.substring(1, 3)) < {_SERVERS} && "
                    f"int(c.substring(5, 7)) < {bounds.cel_chips_per_server()}[self.profile])",
                    "message": "spec.failedChips names a chip outside this UltraServer (server "
                    "or chip index beyond the profile's size; indexes start at 00)",
                    "fieldPath": ".failedChips",
                },
                {
                    "rule": "!has(self.cordonedServers) || "
                    f"self.cordonedServers.all(s, s < {_SERVERS})",
                    "message": "spec.cordonedServers names a server index beyond this "
                    "UltraServer's servers (indexes start at 0)",
                    "fieldPath": ".cordonedServers",
                },
                {
                    "rule": "!has(self.racks) || size(self.racks) <= "
                    f"{bounds.cel_racks()}[self.profile]",
                    "message": "spec.racks lists more racks than an UltraServer of this profile has",
                    "fieldPath": ".racks",
                },
            ]
        }
    )

    profile: ProfileName = Field(
        description="Hardware profile: trn2, trn3-gen1, trn3-gen2 (144 chips = 36 servers x 4) "
        "or trn4-projected."
    )
    servers: int | None = Field(
        default=None,
        ge=1,
        le=bounds.max_servers(),
        description="Servers present; unset means the profile's full count.",
    )
    network: list[_Label] = Field(
        default_factory=list,
        max_length=4,
        description="EFA network groups, nearest first (network-1 alias block, then network-2..4), "
        "e.g. [block-003, spine-0]; from the EKS labels topology.k8s.aws/network-node-layer-N.",
    )
    racks: list[_Label] = Field(
        default_factory=list,
        max_length=8,
        description="Rack names, one per rack of the UltraServer, for placement reports.",
    )
    schedulable: bool = Field(default=True, description="False stops new placements here (cordon).")
    failed_chips: list[_ChipRef] = Field(
        default_factory=list,
        max_length=bounds.max_chips_per_ultraserver(),
        description="Broken chips as local refs `sNN/cNN` (zero-based), never allocated.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    cordoned_servers: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        max_length=bounds.max_servers(),
        description="Zero-based indexes of servers taken out of service.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    drain_policy: DrainPolicy = Field(
        default=DrainPolicy.WAIT,
        description="When unschedulable: Wait for running jobs to finish, or Requeue them.",
    )

    @model_validator(mode="after")
    def _check_bounds(self) -> UltraServerSpec:
        sizes = bounds.profile_sizes()[self.profile.value]
        servers = self.servers or sizes.servers_per_ultraserver
        if self.servers is not None and self.servers > sizes.servers_per_ultraserver:
            raise ValueError(
                f"spec.servers exceeds the {sizes.servers_per_ultraserver} "
                f"servers of an UltraServer of profile {self.profile.value}"
            )
        for ref in self.failed_chips:
            if int(ref[1:3]) >= servers or int(ref[5:7]) >= sizes.chips_per_server:
                raise ValueError(f"spec.failedChips names a chip outside this UltraServer: {ref}")
        for index in self.cordoned_servers:
            if index >= servers:
                raise ValueError(f"spec.cordonedServers names a server index beyond {servers - 1}")
        if len(self.racks) > sizes.racks_per_ultraserver:
            raise ValueError("spec.racks lists more racks than an UltraServer of this profile has")
        return self


class Capacity(StatusModel):
    """What the UltraServer has, failed chips excluded."""

    chips: int = Field(default=0, ge=0, description="Healthy chips.")
    servers: int = Field(default=0, ge=0, description="Servers.")
    racks: int = Field(default=0, ge=0, description="Racks.")


class Allocated(StatusModel):
    """What running or admitted jobs hold."""

    chips: int = Field(default=0, ge=0, description="Chips held by jobs.")
    servers: int = Field(default=0, ge=0, description="Servers with at least one chip held.")


class Free(StatusModel):
    """What a new job could get here now."""

    chips: int = Field(default=0, ge=0, description="Free healthy chips.")
    whole_servers: int = Field(default=0, ge=0, description="Servers with every chip free.")
    whole_racks: int = Field(default=0, ge=0, description="Racks with every chip free.")
    whole_ultra_server: bool = Field(
        default=False, description="True when every chip of the UltraServer is free."
    )


class ChipStatus(StatusModel):
    """One chip as the simulator last saw it."""

    id: str = Field(max_length=NAME_MAX, description="Local chip ref `sNN/cNN`.")
    job: str | None = Field(default=None, max_length=NAME_MAX, description="Job key using it.")
    utilization: float = Field(default=0, ge=0, le=1, description="Busy fraction, 0..1.")
    power_watts: float = Field(default=0, ge=0, description="Power draw in watts.")
    failed: bool = Field(default=False, description="True when the chip is broken.")


class UltraServerStatus(StatusModel):
    """Observed state, written by the operator (capacity) and the simulator (power, chips)."""

    capacity: Capacity | None = Field(default=None, description="Healthy capacity.")
    allocated: Allocated | None = Field(default=None, description="Capacity held by jobs.")
    free: Free | None = Field(default=None, description="Capacity free now.")
    utilization: float | None = Field(
        default=None, ge=0, le=1, description="Fraction of healthy chips allocated, 0..1."
    )
    power_watts: float | None = Field(default=None, ge=0, description="Power draw in watts.")
    energy_kwh: float | None = Field(
        default=None, ge=0, alias="energyKWh", description="Energy used since start, in kWh."
    )
    chips: list[ChipStatus] = Field(
        default_factory=list, description="Per-chip state (written by the simulator)."
    )
    jobs: list[str] = Field(default_factory=list, description="Jobs with chips here, as tj/<namespace>/<name> (TrainingJob) or ij/<namespace>/<name> (InferenceJob).")
    reserved_for: str | None = Field(
        default=None, max_length=320,
        description="The waiting job (tj/... or ij/... key) this UltraServer is held back for: "
                    "jobs queued behind it are placed elsewhere until it starts (backfill "
                    "reservation). Absent when none.")
    heartbeat_time: datetime | None = Field(
        default=None, description="Last time the simulator reported on this UltraServer."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Standard conditions.",
        json_schema_extra=CONDITIONS_LIST,
    )


class UltraServer(BaseModel):
    """One UltraServer: a NeuronSwitch all-to-all domain of servers (e.g. Trn3 Gen2 = 36 servers
    x 4 chips). Cluster-scoped; the operator places jobs onto its chips."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["UltraServer"] = "UltraServer"
    metadata: ObjectMeta
    spec: UltraServerSpec
    status: UltraServerStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
