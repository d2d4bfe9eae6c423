"""Custom resource models (the one source of the CRDs and REST schemas).

Read an object with `TrainingJob.model_validate(body)`; write one with `.body()` or
`to_wire(model)` (camelCase names, unset fields left out). Field names follow
`docs/resources.md`; `python -m ultraplane.resources.crdgen` renders `crds/` from here.
"""

from ultraplane.resources.commons import (
    API_VERSION,
    GROUP,
    LEVEL_RANK,
    VERSION,
    Allocation,
    Condition,
    ConditionStatus,
    Level,
    ModelRef,
    Phase,
    Precision,
    ProfileName,
    TopologyMode,
    TopologyPolicy,
    to_wire,
)
from ultraplane.resources.inferencejobs import (
    InferenceAllocation,
    InferenceJob,
    InferenceJobSpec,
    InferenceJobStatus,
    LatencySLO,
    LoadTarget,
    ReplicaAllocation,
)
from ultraplane.resources.jobs import JobStatus
from ultraplane.resources.metas import ObjectMeta
from ultraplane.resources.trainingjobs import (
    FailurePolicy,
    Progress,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
    Work,
)
from ultraplane.resources.ultraservers import (
    Allocated,
    Capacity,
    ChipStatus,
    DrainPolicy,
    Free,
    UltraServer,
    UltraServerSpec,
    UltraServerStatus,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "LEVEL_RANK",
    "VERSION",
    "Allocated",
    "Allocation",
    "Capacity",
    "ChipStatus",
    "Condition",
    "ConditionStatus",
    "DrainPolicy",
    "FailurePolicy",
    "Free",
    "InferenceAllocation",
    "InferenceJob",
    "InferenceJobSpec",
    "InferenceJobStatus",
    "JobStatus",
    "LatencySLO",
    "Level",
    "LoadTarget",
    "ModelRef",
    "ObjectMeta",
    "Phase",
    "Precision",
    "ProfileName",
    "Progress",
    "ReplicaAllocation",
    "TopologyMode",
    "TopologyPolicy",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "UltraServer",
    "UltraServerSpec",
    "UltraServerStatus",
    "Work",
    "to_wire",
]
