"""An autoscaled InferenceJob scaled by someone other than the core's planner.

Why a rule of its own in the core: with `spec.autoscaling` the planner owns `spec.replicas`,
but the scale subresource lets anyone write it (`kubectl scale`, an HPA, KEDA). The count
they write is applied (refusing a write the API server accepted would leave the spec and
the fleet disagreeing), and the job says so in a condition instead of the two fighting
silently. The operator and the embedded API both write it, so its words live here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ultraplane.documents.jobstatuses import Status, condition

__all__ = ["AUTOSCALING_OVERRIDDEN", "OVERRIDDEN", "overridden", "overridden_message"]

AUTOSCALING_OVERRIDDEN = "AutoscalingOverridden"  # the condition's type
OVERRIDDEN = "ReplicasSetOutsideAutoscaling"  # its reason


def overridden_message(replicas: int) -> str:
    return (f"spec.replicas was set to {replicas} by a writer other than the core's planner "
            "(kubectl scale, an HPA?), while spec.autoscaling lets the planner choose the "
            "count: applied; the planner may change it again. Remove spec.autoscaling to "
            "size the job by hand.")


def overridden(current: Mapping[str, Any], message: str, now: datetime) -> Status:
    """The status fields that say the job's count was set outside its autoscaling."""
    return {"conditions": condition(current, AUTOSCALING_OVERRIDDEN, True, OVERRIDDEN,
                                    message, now)}
