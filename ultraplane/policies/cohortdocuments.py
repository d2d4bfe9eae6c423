"""A TenantCohort's documents: its spec read into the core's `CohortSpec`
(`ultraplane.policies.cohorts`), and the cohorts of a `--queues` file.

Why here, beside `queuedocuments`: a `--queues` file (`ultraplane simulate`, `ultraplane
serve`) holds the queues and, when cohorts nest or have settings of their own, the cohorts;
both readers take their own entries from the same list, each against its resource's model,
so one file works for the simulator, for `serve` and, as manifests, for `kubectl apply`.
Parents that form a cycle are refused here, naming the cycle, before any book sees them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ultraplane.policies.cohorts import CohortSpec, check_parents
from ultraplane.policies.policyfiles import named_specs, read_documents
from ultraplane.resources.commons import problem_of
from ultraplane.resources.tenantcohorts import TenantCohortSpec

__all__ = ["COHORT_KIND", "InvalidCohortError", "cohort_file", "cohort_spec", "cohort_specs",
           "is_cohort_entry"]

COHORT_KIND = "TenantCohort"


class InvalidCohortError(ValueError):
    """A cohort spec the core cannot honour; the message names the cohort and the field."""


def cohort_spec(name: str, spec: Mapping[str, Any] | TenantCohortSpec) -> CohortSpec:
    """The core's `CohortSpec` of the cohort `name` (wire-form spec or the model)."""
    try:
        model = (spec if isinstance(spec, TenantCohortSpec)
                 else TenantCohortSpec.model_validate(spec))
    except ValidationError as exc:
        raise InvalidCohortError(f"cohort {name}: {problem_of(exc)}") from None
    half = model.fair_sharing.usage_half_life_seconds
    try:
        return CohortSpec(name, model.parent, dict(model.nominal),
                          borrowing_limit=model.borrowing_limit,
                          lending_limit=model.lending_limit, weight=model.weight,
                          usage_half_life_s=float(half) if half is not None else None)
    except ValueError as exc:
        raise InvalidCohortError(str(exc)) from None


def is_cohort_entry(entry: object) -> bool:
    """Whether an entry of a `--queues` file is a cohort (a TenantCohort object, or a `name`
    with `kind: TenantCohort` and the fields of its spec) rather than a queue."""
    return isinstance(entry, Mapping) and entry.get("kind") == COHORT_KIND


def cohort_specs(data: Any) -> list[CohortSpec]:
    """The cohorts of a `--queues` file's list (its other entries are queues); a cycle of
    parents, or a cohort listed twice, is an InvalidCohortError naming it."""
    if not isinstance(data, list):
        return []  # (`queue_specs` says what is wrong with the file)
    entries = []
    for entry in data:
        if not is_cohort_entry(entry):
            continue
        if "name" in entry:  # the short form: kind, name and the spec's fields
            entry = {k: v for k, v in entry.items() if k != "kind"}
        entries.append(entry)
    specs = [cohort_spec(name, fields)
             for name, fields in named_specs(entries, COHORT_KIND, "cohort", InvalidCohortError)]
    try:
        check_parents(specs)
    except ValueError as exc:
        raise InvalidCohortError(str(exc)) from None
    return specs


def cohort_file(path: str | Path) -> list[CohortSpec]:
    """The cohorts of the file `path` (`cohort_specs`); ValueError with one sentence, naming
    the file."""
    data = read_documents(path)
    try:
        return cohort_specs(data)
    except InvalidCohortError as exc:
        raise InvalidCohortError(f"{path}: {exc}") from None
