"""The custom resource kinds: their models, names and `kubectl get` columns, and their schemas.

Kept apart from `crdgen` (which renders the CRD files) and `apidocs` (which renders the API
reference) so both read the kinds from here and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ultraplane.resources import podtemplates
from ultraplane.resources.budgets import PowerBudget, PowerBudgetSpec, PowerBudgetStatus
from ultraplane.resources.commons import GROUP
from ultraplane.resources.inferencejobs import InferenceJob, InferenceJobSpec, InferenceJobStatus
from ultraplane.resources.schemas import structural
from ultraplane.resources.tenantcohorts import TenantCohort, TenantCohortSpec, TenantCohortStatus
from ultraplane.resources.tenantqueues import TenantQueue, TenantQueueSpec, TenantQueueStatus
from ultraplane.resources.trainingjobs import TrainingJob, TrainingJobSpec, TrainingJobStatus
from ultraplane.resources.ultraservers import UltraServer, UltraServerSpec, UltraServerStatus

__all__ = ["CATEGORY", "KINDS", "Kind", "root_schema"]

CATEGORY = "ultraplane"


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and how `kubectl get` shows it."""

    kind: str
    plural: str
    short: str
    scope: str
    root: type[BaseModel]
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[tuple[str, str, str, str], ...]  # name, type, jsonPath, description
    # the `scale` subresource (`kubectl scale`, HPA, KEDA): spec, status and selector paths
    scale: tuple[str, str, str] | None = None

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


_AGE = ("Age", "date", ".metadata.creationTimestamp", "Time since creation.")

KINDS: tuple[Kind, ...] = (
    Kind(
        "UltraServer",
        "ultraservers",
        "us",
        "Cluster",
        UltraServer,
        UltraServerSpec,
        UltraServerStatus,
        (
            ("Profile", "string", ".spec.profile", "Hardware profile."),
            ("Chips", "integer", ".status.capacity.chips", "Healthy chips."),
            ("Free", "integer", ".status.free.chips", "Free healthy chips."),
            ("Utilization", "number", ".status.utilization", "Fraction of chips allocated."),
            ("Power", "number", ".status.powerWatts", "Power draw in watts."),
            ("Schedulable", "boolean", ".spec.schedulable", "Open to new placements."),
            ("Reserved", "string", ".status.reservedFor",
             "Waiting job this UltraServer is held back for (backfill reservation)."),
            _AGE,
        ),
    ),
    Kind(
        "TrainingJob",
        "trainingjobs",
        "tj",
        "Namespaced",
        TrainingJob,
        TrainingJobSpec,
        TrainingJobStatus,
        (
            ("Phase", "string", ".status.phase", "Lifecycle phase."),
            ("Chips", "integer", ".spec.chips", "Chips of the gang."),
            (
                "UltraServers",
                "string",
                ".status.allocation.ultraServers",
                "UltraServers holding the chips.",
            ),
            ("Progress", "number", ".status.progressPercent", "Work done, percent."),
            _AGE,
        ),
    ),
    Kind(
        "InferenceJob",
        "inferencejobs",
        "ij",
        "Namespaced",
        InferenceJob,
        InferenceJobSpec,
        InferenceJobStatus,
        (
            ("Phase", "string", ".status.phase", "Lifecycle phase."),
            ("Replicas", "integer", ".spec.replicas", "Model replicas wanted."),
            ("Ready", "integer", ".status.readyReplicas", "Replicas whose pods all run."),
            ("Chips", "integer", ".status.chips", "Chips of all replicas."),
            ("Chips/Replica", "integer", ".spec.chipsPerReplica", "Chips per replica."),
            ("Tokens/s", "number", ".status.tokensPerSecond", "Output tokens per second."),
            _AGE,
        ),
        scale=(".spec.replicas", ".status.replicas", ".status.selector"),
    ),
    Kind(
        "TenantQueue",
        "tenantqueues",
        "tq",
        "Cluster",
        TenantQueue,
        TenantQueueSpec,
        TenantQueueStatus,
        (
            ("Cohort", "string", ".spec.cohort", "Queues that lend each other idle chips."),
            ("Nominal", "integer", ".status.nominalChips", "Chips guaranteed, all profiles."),
            ("Used", "integer", ".status.usedChips", "Chips its running jobs hold."),
            ("Borrowed", "integer", ".status.borrowedChips", "Chips held above nominal."),
            ("Fair", "integer", ".status.fairShareChips",
             "Its weighted fair share of the cohort's chips, capped at its demand."),
            ("Pending", "integer", ".status.pendingJobs", "Jobs waiting."),
            ("Weight", "number", ".spec.weight", "Fair-share weight."),
            _AGE,
        ),
    ),
    Kind(
        "TenantCohort",
        "tenantcohorts",
        "tc",
        "Cluster",
        TenantCohort,
        TenantCohortSpec,
        TenantCohortStatus,
        (
            ("Parent", "string", ".spec.parent", "The cohort it belongs to."),
            ("Weight", "number", ".spec.weight", "Fair-share weight among its parent's children."),
            _AGE,
        ),
    ),
    Kind(
        "PowerBudget",
        "powerbudgets",
        "pb",
        "Cluster",
        PowerBudget,
        PowerBudgetSpec,
        PowerBudgetStatus,
        (
            ("Watts", "number", ".spec.watts", "The limit, in watts."),
            ("Predicted", "number", ".status.predictedWatts", "Predicted draw, in watts."),
            ("Measured", "number", ".status.measuredWatts", "Measured draw, in watts."),
            ("Headroom", "number", ".status.headroomWatts", "Watts left under the limit."),
            ("Policy", "string", ".spec.policy", "Peak, Predicted or Measured."),
            ("Parent", "string", ".spec.parent", "The budget it sits inside."),
            _AGE,
        ),
    ),
)


def root_schema(k: Kind) -> dict[str, Any]:
    """The openAPIV3Schema of a kind: apiVersion/kind/metadata plus spec and status."""
    root: dict[str, Any] = {
        "type": "object",
        "description": (k.root.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "ultraplane.dev/v1alpha1"},
            "kind": {"type": "string", "description": k.kind},
            "metadata": {"type": "object"},
            "spec": structural(k.spec),
            "status": structural(k.status, defaults=False),
        },
    }
    spec_fields = root["properties"]["spec"]["properties"]
    if "template" in spec_fields:  # Kubernetes' PodTemplateSpec, not pydantic's free object
        spec_fields["template"] = podtemplates.crd_schema()
    extra = k.root.model_config.get("json_schema_extra")
    if isinstance(extra, dict) and "x-kubernetes-validations" in extra:
        root["x-kubernetes-validations"] = extra["x-kubernetes-validations"]
    return root
