"""The TenantQueue resource: a team's share of the fleet (cluster-scoped).

Modelled on Kueue's ClusterQueue (docs/queues.md maps it field by field), flattened to what a
chip fleet needs: chips are the one resource and the hardware profile is the flavor. The spec
is what the platform team declares; the status is what the operator counts each cycle. The
same fields, with a `name`, are an entry of `ultraplane simulate --queues FILE`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ultraplane.resources import bounds
from ultraplane.resources.commons import (
    CONDITIONS_LIST,
    MAX_JOB_CHIPS,
    MAX_PRIORITY,
    Condition,
    SpecModel,
    StatusModel,
)
from ultraplane.resources.metas import ObjectMeta

__all__ = ["FairSharing", "FairSharingStrategy", "ReclaimWithinCohort", "TenantQueue",
           "TenantQueueSpec", "TenantQueueStatus", "WithinQueue"]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
_Chips = Annotated[int, Field(ge=0, le=MAX_JOB_CHIPS, strict=True)]
_NAMESPACES_MAX = 1024


class ReclaimWithinCohort(StrEnum):
    """Whether a job of this queue, within its nominal quota, may preempt jobs of other
    queues of the cohort that are borrowing (Kueue's `preemption.reclaimWithinCohort`)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class WithinQueue(StrEnum):
    """Whether a job may preempt lower-priority jobs of its own queue for chips (Kueue's
    `preemption.withinClusterQueue`)."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FairSharingStrategy(StrEnum):
    """How a job of this queue, below its fair share, may preempt jobs of queues of its cohort
    that borrow and hold more than theirs (Kueue's `fairSharing` preemption strategies)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
    NEVER = "Never"


class FairSharing(SpecModel):
    """Fair-sharing preemption: how this queue takes chips back when it holds less than its
    weighted fair share of the cohort, and how long its own jobs are spared after one."""

    preemption_strategy: FairSharingStrategy = Field(
        default=FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        description="LessThanOrEqualToFinalShare: take chips only while the other queue keeps "
        "at least its fair share and this queue's share (chips held over fair share), its job "
        "admitted, is no larger than the other's after; LessThanInitialShare: while this "
        "queue's share after is below the other's before; Never: no fair-sharing preemption.",
    )
    preemption_interval_seconds: int = Field(
        default=600, ge=0, le=7 * 86_400, strict=True,
        description="A job of this queue preempted for fair sharing is not preempted for it "
        "again within this many seconds.",
    )


class TenantQueueSpec(SpecModel):
    """A team's quota of chips, its cohort and its rights."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.nominal.all(p, p in " + bounds.cel_profiles() + ")",
                    "message": "spec.nominal names a hardware profile Ultraplane does not know ("
                    + ", ".join(sorted(bounds.profile_sizes())) + ")",
                    "fieldPath": ".nominal",
                },
                {
                    "rule": "!has(self.defaultFor) || !has(self.namespaces) || "
                    "self.defaultFor.all(n, n in self.namespaces)",
                    "message": "spec.defaultFor names a namespace that spec.namespaces does not "
                    "allow: a queue can only be the default of namespaces that may use it",
                    "fieldPath": ".defaultFor",
                },
            ]
        }
    )

    nominal: dict[str, _Chips] = Field(
        min_length=1, max_length=8,
        description="Chips guaranteed to this queue, per hardware profile (e.g. "
        "`{trn3-gen2: 576}`). Kueue: nominalQuota of a flavor.",
    )
    cohort: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
        description="Queues of one cohort lend each other their unused nominal chips. None: "
        "the queue borrows and lends nothing.",
    )
    borrowing_limit: _Chips | None = Field(
        default=None,
        description="Chips over nominal this queue may borrow from its cohort, per profile. "
        "None: as many as the cohort has idle.",
    )
    lending_limit: _Chips | None = Field(
        default=None,
        description="Chips of its unused nominal quota this queue lends to its cohort, per "
        "profile; the rest is kept for it alone. None: all of it.",
    )
    weight: float = Field(
        default=1.0, gt=0, le=1e6,
        description="Fair-share weight: the cohort's idle chips are shared among the queues "
        "that want more in proportion to their weights.",
    )
    reclaim_within_cohort: ReclaimWithinCohort = Field(
        default=ReclaimWithinCohort.ANY,
        description="Never, LowerPriority or Any: which borrowers of the cohort a job within "
        "this queue's nominal quota may preempt to get its chips back.",
    )
    within_queue: WithinQueue = Field(
        default=WithinQueue.LOWER_PRIORITY,
        description="Never or LowerPriority: whether a job may preempt lower-priority jobs of "
        "its own queue.",
    )
    fair_sharing: FairSharing = Field(
        default_factory=FairSharing,
        description="Fair-sharing preemption among the cohort's borrowers: a job of this queue "
        "below its weighted fair share may preempt jobs of queues above theirs, from one "
        "UltraServer (or domain) it can use.",
    )
    max_priority: int | None = Field(
        default=None, strict=True, ge=-MAX_PRIORITY, le=MAX_PRIORITY,
        description="Jobs above this priority are refused (Inadmissible), so priority is no "
        "way around a quota. None: any priority.",
    )
    namespaces: list[_Namespace] | None = Field(
        default=None, max_length=_NAMESPACES_MAX,
        description="Namespaces whose jobs may use this queue. None: every namespace. Kueue: "
        "namespaceSelector on kubernetes.io/metadata.name.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    default_for: list[_Namespace] = Field(
        default_factory=list, max_length=_NAMESPACES_MAX,
        description="Namespaces whose jobs that set no spec.queueName use this queue. Kueue: "
        "a LocalQueue in each of those namespaces.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class TenantQueueStatus(StatusModel):
    """What the queue holds and what waits for it, counted by the operator."""

    nominal_chips: int | None = Field(default=None, ge=0, description="Nominal chips, all profiles.")
    used_chips: int | None = Field(default=None, ge=0, description="Chips its running jobs hold.")
    borrowed_chips: int | None = Field(
        default=None, ge=0, description="Chips held above nominal (borrowed from the cohort).")
    usage: dict[str, int] = Field(
        default_factory=dict, description="Chips held, per hardware profile.")
    fair_share_chips: int | None = Field(
        default=None, ge=0, description="Its weighted fair share of its cohort's nominal "
        "chips, capped at what its running and waiting jobs want (fair-sharing preemption "
        "evens out towards it). None: no cohort.")
    admitted_jobs: int | None = Field(default=None, ge=0, description="Jobs holding chips.")
    pending_jobs: int | None = Field(default=None, ge=0, description="Jobs waiting.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Active: the operator admits jobs to this queue.",
        json_schema_extra=CONDITIONS_LIST,
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the operator last acted on.")


class TenantQueue(BaseModel):
    """A team's share of the fleet: nominal chips per hardware profile, a cohort to borrow
    from and lend to, a fair-share weight, preemption policies and the namespaces that may use
    it. Cluster-scoped; jobs name it in spec.queueName."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["TenantQueue"] = "TenantQueue"
    metadata: ObjectMeta
    spec: TenantQueueSpec
    status: TenantQueueStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
