"""REST shapes (request and response bodies) shared by the routers and both backends.

Job specs are the `ultraplane.resources` models themselves, so a body the API
accepts is exactly a spec the CRD accepts. Jobs are returned in the shape of a
custom resource (`apiVersion`, `kind`, `metadata`, `spec`, `status`) whichever
backend serves them, so a client can switch from the embedded fleet to a
cluster without changing its parser.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ultraplane.hardware.topology import canonical_level
from ultraplane.resources import InferenceJobSpec, Level, ProfileName, TopologyMode, TrainingJobSpec
from ultraplane.resources.labels import check_labels, labels_json_schema

JobKind = Literal["TrainingJob", "InferenceJob"]
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Wire(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


Labels = Annotated[
    dict[str, str],
    AfterValidator(check_labels),
    Field(description="Labels, by Kubernetes' rules for keys and values; at most 64.",
          json_schema_extra=labels_json_schema()),
]

LIST_LIMIT_DEFAULT = 500
LIST_LIMIT_MAX = 1000


API_VERSION = "ultraplane.dev/v1alpha1"
# A job spec's free-form parts (the pod template) are bounded here, at the request, so nothing
# later (the store's JSON, the queue's copy of the spec) meets a shape it cannot serialise.
MAX_SPEC_DEPTH = 32  # a real PodTemplateSpec nests about 12 levels
MAX_SPEC_NODES = 50_000  # objects, lists and scalars in one spec


def check_nesting(value: Any, *, where: str) -> None:
    """Refuse JSON nested deeper than MAX_SPEC_DEPTH or larger than MAX_SPEC_NODES.

    Walked with an explicit stack, so a body nested thousands deep is measured, not recursed.
    """
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    nodes = 0
    while stack:
        node, path = stack.pop()
        nodes += 1
        if nodes > MAX_SPEC_NODES:
            raise ValueError(f"has more than {MAX_SPEC_NODES} values; make it smaller")
        if len(path) > MAX_SPEC_DEPTH:
            shown = ".".join((where, *path[:6]))
            raise ValueError(f"nests deeper than {MAX_SPEC_DEPTH} levels (at {shown}...)")
        if isinstance(node, dict):
            stack.extend((v, (*path, str(k))) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, str(i))) for i, v in enumerate(node))


class ObjectMetaIn(Wire):
    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    namespace: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
        description="Optional, as in a kubectl manifest; must be the path's namespace.")
    labels: Labels = Field(default_factory=dict)


class _JobCreate(Wire):
    """A job body: a kubectl manifest as JSON is one, `apiVersion` and `kind` included."""

    api_version: Literal["ultraplane.dev/v1alpha1"] | None = Field(
        default=None, description=f"Optional; if given, `{API_VERSION}`.")
    metadata: ObjectMetaIn

    @field_validator("spec", mode="before", check_fields=False)
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        check_nesting(value, where="spec")
        return value

    @model_validator(mode="after")
    def _storable(self) -> _JobCreate:
        # The store and the queue keep the spec as JSON: a spec that cannot be written is a
        # 422 now, not a job half registered that breaks every tick.
        spec: BaseModel = getattr(self, "spec")  # noqa: B009 (declared by each subclass)
        try:
            spec.model_dump_json(by_alias=True, exclude_none=True)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"spec cannot be stored: {exc}") from None
        return self


class TrainingJobCreate(_JobCreate):
    kind: Literal["TrainingJob"] | None = Field(
        default=None, description="Optional; if given, `TrainingJob`.")
    spec: TrainingJobSpec


class InferenceJobCreate(_JobCreate):
    kind: Literal["InferenceJob"] | None = Field(
        default=None, description="Optional; if given, `InferenceJob`.")
    spec: InferenceJobSpec


class ObjectMeta(Wire):
    name: str
    namespace: str
    uid: str
    creation_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class JobResource(Wire):
    api_version: str = "ultraplane.dev/v1alpha1"
    kind: JobKind
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: dict[str, Any] = Field(default_factory=dict)


class ReplicasPatch(Wire):
    """The one field of a running InferenceJob's spec that may change."""

    replicas: int = Field(strict=True, description="The replica count wanted.")


class InferenceJobPatch(Wire):
    """`PATCH` body of an InferenceJob (a JSON merge patch): only `spec.replicas` may change
    once it is created; other fields are refused."""

    spec: ReplicasPatch


class ScaleMeta(Wire):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    creation_timestamp: str | None = None


class ScaleSpec(Wire):
    replicas: int = Field(strict=True, description="The replica count wanted (spec.replicas).")


class ScaleStatus(Wire):
    replicas: int = Field(default=0, description="Replicas placed (status.replicas).")
    selector: str | None = Field(default=None, description="Label selector of the pods.")


class Scale(Wire):
    """An InferenceJob's scale, shaped as Kubernetes' `autoscaling/v1` Scale (what
    `kubectl scale`, an HPA and KEDA read and write)."""

    api_version: Literal["autoscaling/v1"] = "autoscaling/v1"
    kind: Literal["Scale"] = "Scale"
    metadata: ScaleMeta = Field(default_factory=ScaleMeta)
    spec: ScaleSpec
    status: ScaleStatus = Field(default_factory=ScaleStatus)


class ListMeta(Wire):
    continue_: str | None = Field(
        default=None, alias="continue",
        description="Pass as `continue` to get the next page; absent on the last page.")


class JobList(Wire):
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[JobResource]


class JobPage(BaseModel):
    """One page of a backend's job list: the items and the token of the next page."""

    items: list[JobResource]
    next: str | None = None


class UltraServerView(Wire):
    name: str
    profile: str
    network: list[str]
    schedulable: bool
    chips: int
    allocated_chips: int
    free_chips: int
    failed_chips: list[str]
    jobs: list[str] = Field(description="Jobs with chips here: tj/<namespace>/<name> or ij/<namespace>/<name>.")
    utilization: float = 0.0
    power_watts: float = 0.0
    reserved_for: str | None = Field(
        default=None, description="The waiting job this UltraServer is held back for (backfill "
                                  "reservation): jobs queued behind it are placed elsewhere.")


class UltraServerList(Wire):
    items: list[UltraServerView]


class DomainCapacityView(Wire):
    """Chips of one domain: the fleet, an UltraServer or a network domain. `unusable` =
    failed, cordoned or unschedulable chips that no job holds."""

    name: str
    level: str
    total: int
    allocated: int
    free: int
    unusable: int
    free_whole_servers: int
    free_whole_racks: int
    free_whole_ultra_servers: int = Field(alias="freeWholeUltraServers")


class CapacityView(Wire):
    """The allocator's capacity report: the fleet, each UltraServer, each network domain by
    level, and how many gangs of each standard size (1, 4, 16, 36, 72, 144, 288, ...) fit now."""

    cluster: DomainCapacityView
    ultra_servers: list[DomainCapacityView]
    levels: dict[str, list[DomainCapacityView]]
    fits: dict[str, int]
    utilization: float = Field(description="Allocated / usable chips of the fleet.")


# Any spelling the CLI's --require takes (`Rack`, `BLOCK`): one level parser for both.
LevelIn = Annotated[Level, BeforeValidator(canonical_level)]


class DryRunRequest(Wire):
    """A gang request. Numbers are JSON integers and flags JSON booleans (no strings)."""

    chips: int = Field(ge=1, le=1_048_576, strict=True, description="Chips in the gang.")
    required_level: LevelIn | None = Field(
        default=None, description="Never cross this level; a network level the fleet does "
                                  "not have is a 422.")
    preferred_level: LevelIn | None = None
    whole_servers: bool = Field(default=False, strict=True)
    mode: TopologyMode | None = Field(
        default=None, description="Local, SplitWhenItPays or Unconstrained, as a job's "
        "spec.topology.mode (unset: Unconstrained if requiredLevel is above ultraserver, "
        "else Local).")
    profile: ProfileName | None = None
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000, strict=True)
    alternatives: int = Field(default=2, ge=0, le=5, strict=True,
                              description="Other placements to show.")


class PlacementView(Wire):
    chip_ids: list[str]
    ultra_servers: list[str]
    servers: list[str]
    level: str
    score: float


class NoFitView(Wire):
    kind: str
    message: str


class PreemptionView(Wire):
    victims: list[str]
    placement: PlacementView


class DryRunResult(Wire):
    fits: bool
    placement: PlacementView | None = None
    alternatives: list[PlacementView] = Field(default_factory=list)
    preemption: PreemptionView | None = None
    reason: NoFitView | None = None


class Health(Wire):
    status: Literal["ok", "unavailable"]
    backend: str
    detail: str = ""
