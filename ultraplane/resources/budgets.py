"""The PowerBudget resource: watts over a set of UltraServers (cluster-scoped).

Budgets nest like a data centre's power delivery (a facility, its rows, single UltraServers):
a budget names its `parent`, and the parent must cover every UltraServer it does. The spec is
what the facility team declares; the status is what the operator predicts and measures. The
same fields, with a `name`, are an entry of `ultraplane simulate --power-budget FILE` and
`ultraplane serve --power-budgets FILE`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ultraplane.resources.commons import (
    CONDITIONS_LIST,
    Condition,
    SpecModel,
    StatusModel,
)
from ultraplane.resources.metas import ObjectMeta

__all__ = ["BudgetPolicy", "CappedJob", "PowerBudget", "PowerBudgetSpec", "PowerBudgetStatus",
           "UltraServerSelector"]

_Name = Annotated[str, Field(min_length=1, max_length=253)]
_MAX_WATTS = 1e10  # 10 GW: far above any facility


class BudgetPolicy(StrEnum):
    """How a budget's draw is predicted at admission."""

    PEAK = "Peak"
    PREDICTED = "Predicted"
    MEASURED = "Measured"


class UltraServerSelector(SpecModel):
    """Which UltraServers a budget covers; every selector given must match (none: all)."""

    names: list[_Name] | None = Field(
        default=None, max_length=100_000, description="UltraServers by name.",
        json_schema_extra={"x-kubernetes-list-type": "set"})
    blocks: list[_Name] | None = Field(
        default=None, max_length=1024,
        description="UltraServers in these network blocks (their spec.network names).",
        json_schema_extra={"x-kubernetes-list-type": "set"})
    match_labels: dict[str, str] | None = Field(
        default=None, max_length=64,
        description="UltraServers carrying every one of these labels (e.g. a row's).")


class PowerBudgetSpec(SpecModel):
    """A power limit over UltraServers, and how its draw is predicted."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.ultraServers) || has(self.ultraServers.names) || "
                    "has(self.ultraServers.blocks) || has(self.ultraServers.matchLabels)",
                    "message": "spec.ultraServers must name UltraServers, blocks or labels; "
                    "leave it out to cover the whole fleet",
                    "fieldPath": ".ultraServers",
                },
            ]
        }
    )

    watts: float = Field(gt=0, le=_MAX_WATTS, description="The limit, in watts.")
    ultra_servers: UltraServerSelector | None = Field(
        default=None, description="The UltraServers it covers. None: the whole fleet.")
    parent: str | None = Field(
        default=None, min_length=1, max_length=253,
        description="The budget this one sits inside (it must cover all of this one's "
        "UltraServers).")
    policy: BudgetPolicy = Field(
        default=BudgetPolicy.PREDICTED,
        description="Peak (every chip at peak: safe, wasteful), Predicted (the power model at "
        "each job's activity and precision, plus the margin) or Measured (the measured draw "
        "plus the margin).")
    margin: float = Field(
        default=0.05, ge=0, le=1,
        description="Share added to the predicted (or measured) dynamic draw.")


class CappedJob(StatusModel):
    """A running job whose chips are power-capped to keep a budget."""

    job: str = Field(max_length=320, description="tj/<namespace>/<name> or ij/<namespace>/<name>.")
    cap_watts: float = Field(ge=0, description="The per-chip cap, in watts.")


class PowerBudgetStatus(StatusModel):
    """What the operator predicts and measures for the budget."""

    predicted_watts: float | None = Field(
        default=None, ge=0, description="Predicted draw of its UltraServers, in watts.")
    measured_watts: float | None = Field(
        default=None, ge=0, description="Measured draw (chip telemetry), in watts.")
    headroom_watts: float | None = Field(
        default=None, description="watts minus the predicted draw (negative: over).")
    ultra_servers: int | None = Field(default=None, ge=0, description="UltraServers it covers.")
    powered_down: int | None = Field(default=None, ge=0, description="Of those, powered down.")
    capped: list[CappedJob] = Field(
        default_factory=list, max_length=100_000, description="Jobs capped to keep it.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Active: the operator admits within this budget.",
        json_schema_extra=CONDITIONS_LIST)
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the operator last acted on.")


class PowerBudget(BaseModel):
    """A power budget: jobs are admitted only while the predicted draw of every budget that
    covers their chips stays within it, and running jobs are power-capped, lowest priority
    first, when the draw would exceed it. Cluster-scoped."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", json_schema_extra={
        "x-kubernetes-validations": [{
            "rule": "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
            "message": "spec.parent names this budget itself",
        }]})

    api_version: Literal["ultraplane.dev/v1alpha1"] = Field(
        "ultraplane.dev/v1alpha1", alias="apiVersion")
    kind: Literal["PowerBudget"] = "PowerBudget"
    metadata: ObjectMeta
    spec: PowerBudgetSpec
    status: PowerBudgetStatus | None = None

    def body(self) -> dict[str, Any]:
        """The Kubernetes JSON body."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
