"""The TenantCohort resource: a cohort's own settings, and its place in a tree of cohorts.

Modelled on Kueue's Cohort (docs/queues.md maps it): TenantQueues join a cohort by naming it in
`spec.cohort`, as they always have; a TenantCohort of that name is needed only to give the
cohort a parent, a pool of chips of its own, borrowing and lending limits towards its parent,
a weight among its parent's children, or a memory of its queues' usage. Cluster-scoped. The
same fields, with a `name` and `kind: TenantCohort`, are an entry of a `--queues` file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ultraplane.resources import bounds
from ultraplane.resources.commons import (
    CONDITIONS_LIST,
    MAX_JOB_CHIPS,
    Condition,
    SpecModel,
    StatusModel,
)
from ultraplane.resources.metas import ObjectMeta
from ultraplane.resources.tenantqueues import DNS_LABEL

_Chips = Annotated[int, Field(ge=0, le=MAX_JOB_CHIPS, strict=True)]

__all__ = ["CohortFairSharing", "TenantCohort", "TenantCohortSpec", "TenantCohortStatus"]


class CohortFairSharing(SpecModel):
    """How the cohort's queues' fair share remembers their usage."""

    usage_half_life_seconds: int | None = Field(
        default=None, ge=60, le=90 * 86_400, strict=True,
        description="Each of the cohort's queues (and its child cohorts' queues that set none "
        "of their own) remembers the chip-seconds it used, halved every this many seconds: "
        "a queue that used more recently, over its weight, borrows idle chips after the "
        "others and its jobs are the first fair-sharing victims. None: only what queues hold "
        "now counts.",
    )


class TenantCohortSpec(SpecModel):
    """A cohort's parent, its own quota and limits, and its weight."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.nominal) || self.nominal.all(p, p in "
                    + bounds.cel_profiles() + ")",
                    "message": "spec.nominal names a hardware profile Ultraplane does not know ("
                    + ", ".join(sorted(bounds.profile_sizes())) + ")",
                    "fieldPath": ".nominal",
                },
            ]
        }
    )

    parent: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
        description="The cohort this one belongs to: its queues borrow from the parent's "
        "subtree once their own cohort has nothing idle. None: a root. Kueue: spec.parentName.",
    )
    nominal: dict[str, _Chips] = Field(
        default_factory=dict, max_length=8,
        description="Chips of the cohort's own, per hardware profile, on top of its queues' "
        "nominal quotas: a pool its subtree shares. Kueue: a Cohort's nominalQuota.",
    )
    borrowing_limit: _Chips | None = Field(
        default=None,
        description="Chips its subtree may take from its parent beyond what the subtree is "
        "given (its queues' quotas, its own pool), per profile. None: as many as the parent "
        "has idle.",
    )
    lending_limit: _Chips | None = Field(
        default=None,
        description="Chips of what its subtree is given that the rest of its parent's tree "
        "may borrow, per profile; the rest is kept for its subtree. None: all of it.",
    )
    weight: float = Field(
        default=1.0, gt=0, le=1e6,
        description="Fair-share weight of the cohort's subtree among its parent's queues and "
        "cohorts: its parent's fair share is split among them by weight, each capped at what "
        "it wants.",
    )
    fair_sharing: CohortFairSharing = Field(
        default_factory=CohortFairSharing,
        description="Fair sharing that remembers usage (off by default).",
    )


class TenantCohortStatus(StatusModel):
    """Whether the operator uses the cohort."""

    conditions: list[Condition] = Field(
        default_factory=list, description="Active: the cohort's settings are in force.",
        json_schema_extra=CONDITIONS_LIST,
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the operator last acted on.")


class TenantCohort(BaseModel):
    """A cohort of TenantQueues: its parent cohort, a pool of chips of its own, borrowing and
    lending limits towards its parent, and its fair-share weight. Cluster-scoped; queues join
    it by naming it in spec.cohort."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", json_schema_extra={
        "x-kubernetes-validations": [{
            "rule": "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
            "message": "spec.parent names this cohort itself: a cohort's parent must not be "
            "itself or one of its descendants",
        }]})

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion")
    kind: Literal["TenantCohort"] = "TenantCohort"
    metadata: ObjectMeta
    spec: TenantCohortSpec
    status: TenantCohortStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
