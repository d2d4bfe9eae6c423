"""A PowerBudget's documents: its spec read into the core's `BudgetSpec` (defined, and
validated, in `ultraplane.policies.powerbudgets`), and its status written back.

Why here: the operator (from PowerBudget objects), the embedded API (`serve --power-budgets
FILE`), the replay (`simulate --power-budget FILE`) and the Kubernetes backend read a budget's
spec, against the resource's own model, and the operator and the API report a budget's draw;
reading and reporting once keeps them alike, as `queuedocuments` does for queues.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ultraplane.hardware.powermodels import chip_power_of
from ultraplane.policies.policyfiles import named_specs, read_documents
from ultraplane.policies.powerbook import DEFAULT_ACTIVITY, BudgetStatus, JobPower, PowerBook
from ultraplane.policies.powerbudgets import BudgetSpec, PowerPolicy, validate_budgets
from ultraplane.resources.budgets import PowerBudgetSpec
from ultraplane.resources.commons import problem_of

__all__ = ["InvalidBudgetError", "budget_file", "budget_spec", "budget_specs", "budget_status",
           "budget_statuses", "budget_wire", "job_power"]


class InvalidBudgetError(ValueError):
    """A budget spec the core cannot honour; the message names the budget and the field."""


def budget_spec(name: str, spec: Mapping[str, Any] | PowerBudgetSpec) -> BudgetSpec:
    """The core's `BudgetSpec` of the budget `name` (wire-form spec or the model)."""
    try:
        model = spec if isinstance(spec, PowerBudgetSpec) else PowerBudgetSpec.model_validate(spec)
    except ValidationError as exc:
        raise InvalidBudgetError(f"power budget {name}: {problem_of(exc)}") from None
    chosen = model.ultra_servers
    try:
        return BudgetSpec(
            name, model.watts,
            ultraservers=tuple(chosen.names) if chosen and chosen.names is not None else None,
            blocks=tuple(chosen.blocks) if chosen and chosen.blocks is not None else None,
            labels=dict(chosen.match_labels) if chosen and chosen.match_labels else None,
            parent=model.parent, policy=PowerPolicy(model.policy.value), margin=model.margin)
    except ValueError as exc:
        raise InvalidBudgetError(str(exc)) from None


# The simulator's old file format chose UltraServers at the top level of an entry.
_OLD_SELECTORS = {"ultraservers": "names", "blocks": "blocks", "labels": "matchLabels"}


def budget_specs(data: Any) -> list[BudgetSpec]:
    """The budgets of a `--power-budgets` / `--power-budget` file (`ultraplane serve`,
    `ultraplane simulate`): a list of entries, each a `name` and the fields of a PowerBudget's
    spec, or PowerBudget objects (`policyfiles`); InvalidBudgetError names the entry and the
    field."""
    if isinstance(data, Mapping) and "budgets" in data:
        raise InvalidBudgetError("the power budgets must be a YAML list, without the "
                                 "`budgets:` key of the old simulator format, each entry a "
                                 "name and the fields of a PowerBudget spec")
    if not isinstance(data, list) or not data:
        raise InvalidBudgetError("the power budgets must be a non-empty YAML list, each entry a "
                                 "name and the fields of a PowerBudget spec")
    specs: list[BudgetSpec] = []
    for name, fields in named_specs(data, "PowerBudget", "power budget", InvalidBudgetError):
        old = sorted(set(fields) & set(_OLD_SELECTORS))
        if old:
            raise InvalidBudgetError(
                f"power budget {name}: {old[0]} is the old simulator format; choose "
                f"UltraServers as a PowerBudget spec does, ultraServers: "
                f"{{{_OLD_SELECTORS[old[0]]}: ...}} (names, blocks, matchLabels)")
        specs.append(budget_spec(name, fields))
    try:
        validate_budgets(specs)
    except ValueError as exc:
        raise InvalidBudgetError(str(exc)) from None
    return specs


def budget_file(path: str | Path) -> list[BudgetSpec]:
    """The budgets of the file `path` (`budget_specs`); ValueError with one sentence, naming
    the file."""
    data = read_documents(path)
    try:
        return budget_specs(data)
    except InvalidBudgetError as exc:
        raise InvalidBudgetError(f"{path}: {exc}") from None


def budget_wire(spec: BudgetSpec) -> dict[str, Any]:
    """A `BudgetSpec` as the wire form of a PowerBudget's spec (unset fields left out)."""
    chosen = {"names": list(spec.ultraservers) if spec.ultraservers is not None else None,
              "blocks": list(spec.blocks) if spec.blocks is not None else None,
              "matchLabels": dict(spec.labels) if spec.labels else None}
    chosen = {k: v for k, v in chosen.items() if v is not None}
    wire: dict[str, Any] = {"watts": spec.watts, "ultraServers": chosen or None,
                            "parent": spec.parent, "policy": spec.policy.value,
                            "margin": spec.margin}
    return {k: v for k, v in wire.items() if v is not None}


def budget_status(status: BudgetStatus, generation: int | None = None) -> dict[str, Any]:
    """The status document (wire form) of one budget as the book reports it."""
    doc: dict[str, Any] = {
        "predictedWatts": round(status.predicted_w, 1),
        "headroomWatts": round(status.headroom_w, 1),
        "ultraServers": status.ultraservers, "poweredDown": status.powered_down,
        "capped": [{"job": str(job), "capWatts": round(cap, 1)} for job, cap in status.capped],
    }
    if status.measured_w is not None:
        doc["measuredWatts"] = round(status.measured_w, 1)
    if generation is not None:
        doc["observedGeneration"] = generation
    return doc


def budget_statuses(book: PowerBook,
                    generations: Mapping[str, int | None] | None = None) -> dict[str, dict[str, Any]]:
    """Every budget's status document, by name."""
    return {s.name: budget_status(s, (generations or {}).get(s.name)) for s in book.status()}


def job_power(kind: str, spec: Mapping[str, Any]) -> JobPower:
    """What the power book predicts a job's draw with (wire-form spec): its precision at the
    default activity. An InferenceJob with a latency objective is never capped below its
    predicted draw, so a cap never breaks the objective (no adapter measures latency under a
    cap before it is set)."""
    precision = str(spec.get("precision") or "BF16")
    floor = None
    if kind == "InferenceJob" and spec.get("latencySLO"):
        try:
            floor = chip_power_of(str(spec.get("profile") or "trn3-gen2")).busy(
                DEFAULT_ACTIVITY, precision)
        except (KeyError, ValueError, OSError):  # an unknown profile: the job cannot fit
            floor = None
    return JobPower(DEFAULT_ACTIVITY, precision, floor)
