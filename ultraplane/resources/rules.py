"""Cross-field rules of the job kinds, as CEL for the API server and as Python for the models.

Each rule exists twice on purpose: the API server can only run CEL, and the REST API and
the unit tests only run pydantic. The invalid-manifest corpus is run through both (unit
tier: pydantic; kube tier: the real API server), which is what keeps the twins in step.
The messages name the field, so `kubectl apply` tells the user what to fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ultraplane.resources import bounds
from ultraplane.resources.commons import ProfileName, TopologyPolicy

FIT_LEVELS = ("server", "rack", "ultraserver")
# Phases in which a job's spec may still change: nothing has been placed yet.
EDITABLE_PHASES = ("Pending",)


def _fit_rule(field: str, level: str) -> dict[str, Any]:
    """One rule per level: nested map literals make the cost estimate reject the CRD."""
    largest = bounds.largest(level)
    limit = f"(has(self.profile) ? {bounds.cel_level_chips(level)}[self.profile] : {largest})"
    limit_text = (
        f"(has(self.profile) ? {bounds.cel_level_chips(level, as_text=True)}[self.profile] "
        f": '{largest}')"
    )
    return {
        "rule": "!has(self.topology) || !has(self.topology.requiredLevel) || "
        f"self.topology.requiredLevel != '{level}' || self.{field} <= {limit}",
        "messageExpression": f"'spec.{field} cannot fit in one {level}' + (has(self.profile) ? "
        f"' of profile ' + self.profile : ' of any profile') + ', which holds at most ' + "
        f"{limit_text} + ' chips (topology.requiredLevel)'",
        "fieldPath": f".{field}",
    }


def fit_rules(field: str) -> list[dict[str, Any]]:
    """CEL rules on a job spec whose gang size is `field` (chips, or chipsPerReplica).

    The messages quote the limits but not the requested count: `string(int)` in a
    messageExpression makes the API server's cost estimate reject the whole CRD.
    """
    per_server = f"{bounds.cel_chips_per_server()}[self.profile]"
    per_server_text = f"{bounds.cel_chips_per_server(as_text=True)}[self.profile]"
    return [
        *(_fit_rule(field, level) for level in FIT_LEVELS),
        {
            "rule": "!has(self.topology) || !self.topology.wholeServers || !has(self.profile) "
            f"|| self.{field} % {per_server} == 0",
            "messageExpression": f"'spec.{field} must be a multiple of ' + {per_server_text} + "
            "' (the chips of one server of profile ' + self.profile + ') when "
            "topology.wholeServers is true'",
            "fieldPath": f".{field}",
        },
    ]


def check_fit(
    chips: int, field: str, profile: ProfileName | None, topology: TopologyPolicy
) -> None:
    """The Python twin of `fit_rules`; raises ValueError with the same sentence."""
    level = topology.required_level.value if topology.required_level else None
    if level in FIT_LEVELS:
        if profile is None:
            limit, where = bounds.largest(level), " of any profile"
        else:
            limit, where = bounds.level_chips(level)[profile.value], f" of profile {profile.value}"
        if chips > limit:
            raise ValueError(
                f"spec.{field} cannot fit in one {level}{where}, which holds at most "
                f"{limit} chips (topology.requiredLevel)"
            )
    if topology.whole_servers and profile is not None:
        per_server = bounds.profile_sizes()[profile.value].chips_per_server
        if chips % per_server:
            raise ValueError(
                f"spec.{field} must be a multiple of {per_server} (the chips of one "
                f"server of profile {profile.value}) when topology.wholeServers is true"
            )


def immutable_spec_rule() -> dict[str, Any]:
    """Root-level transition rule: the spec is frozen once the job left Pending.

    It sits at the root because it must see `status.phase`; a main-resource update cannot
    change status (the status subresource resets it), and a /status update cannot change
    spec, so `oldSelf.status.phase` is always the phase the server had stored.
    """
    phases = "[" + ", ".join(f"'{p}'" for p in EDITABLE_PHASES) + "]"
    return {
        "rule": "!has(oldSelf.status) || !has(oldSelf.status.phase) || "
        f"oldSelf.status.phase in {phases} || self.spec == oldSelf.spec",
        "messageExpression": "'spec is immutable once the job is ' + oldSelf.status.phase + "
        "' (it may change only while Pending); delete and recreate the job to change it'",
        "fieldPath": ".spec",
        "reason": "FieldValueForbidden",
    }


def immutable_spec_but_rule(fields: Sequence[str], mutable: str) -> dict[str, Any]:
    """`immutable_spec_rule` for a kind whose spec keeps one field editable after admission
    (an InferenceJob's `replicas`, which `kubectl scale` and autoscalers change): every other
    field of `fields` (the spec's JSON names) is compared, as present-and-equal or absent in
    both. CEL cannot compare an object minus a field, hence one term per field."""
    phases = "[" + ", ".join(f"'{p}'" for p in EDITABLE_PHASES) + "]"
    terms = [f"(has(self.spec.{f}) ? has(oldSelf.spec.{f}) && self.spec.{f} == "
             f"oldSelf.spec.{f} : !has(oldSelf.spec.{f}))" for f in fields if f != mutable]
    return {
        "rule": "!has(oldSelf.status) || !has(oldSelf.status.phase) || "
        f"oldSelf.status.phase in {phases} || ({' && '.join(terms)})",
        "messageExpression": "'spec is immutable once the job is ' + oldSelf.status.phase + "
        f"' except spec.{mutable} (the rest may change only while Pending); delete and "
        "recreate the job to change it'",
        "fieldPath": ".spec",
        "reason": "FieldValueForbidden",
    }
