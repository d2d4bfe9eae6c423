"""Pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts only a *structural* schema: every node typed, no `$ref`, no `anyOf`
with null, no `additionalProperties` beside `properties`, OpenAPI v3.0 boolean
`exclusiveMinimum`. Pydantic emits JSON Schema 2020-12, so this module rewrites it.
The same output feeds the CRDs and the API reference, so they cannot disagree.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

_DROP = {"title"}


def structural(model: type[BaseModel], *, defaults: bool = True) -> dict[str, Any]:
    """The structural schema of `model`; `defaults=False` drops every `default`
    (status is written by controllers, so the server must not invent values there)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _clean(raw, defs, defaults)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        # The field's own description and default beat the referenced model's docstring.
        node = {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) != 1:
            raise ValueError(f"a union other than X | None cannot be structural: {node}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(branches[0], defs), **rest}
    return node


def _clean(node: dict[str, Any], defs: dict[str, Any], defaults: bool) -> dict[str, Any]:
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and (value is None or not defaults)):
            continue
        if key == "additionalProperties" and (value is False or "properties" in node):
            continue
        if key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
            continue
        if key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
            continue
        if key == "properties":
            out[key] = {name: _clean(sub, defs, defaults) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _clean(value, defs, defaults)
        else:
            out[key] = value
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in out and out.get("type") == "string" and "maxLength" not in out:
        # Bounded strings keep the CEL cost estimate of rules that concatenate them finite.
        out["maxLength"] = max(len(v) for v in out["enum"])
    # A stable, readable key order: what a field is first, then its bounds.
    first = [k for k in ("type", "description") if k in out]
    return {**{k: out[k] for k in first}, **{k: out[k] for k in sorted(out) if k not in first}}


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every (path, node) of a structural schema, parents first; paths like `.spec.chips`,
    `.spec.failedChips[]`."""
    found = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        found += walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += walk(schema["additionalProperties"], f"{path}{{}}")
    return found
