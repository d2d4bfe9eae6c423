"""The services a replay serves beside its training trace: `ultraplane simulate --inference`.

Why a file of InferenceJob-like specs: a study of a service is the spec a user would apply
(model, chips a replica, precision, priority, autoscaling or fixed replicas, how long it
runs) plus where its requests come from (a request trace, scaled and looped). The fields
keep the InferenceJob's camelCase names and its autoscaling block (the resource's own
pydantic model), so the file reads like the manifest; every field is validated before a
second of replay, and a bad one is one sentence naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from ultraplane.resources.commons import MAX_PRIORITY, Precision, SpecModel
from ultraplane.resources.inferencejobs import MAX_REPLICAS, Autoscaling
from ultraplane.serving.llms import MODELS

__all__ = ["RequestSource", "ServiceSpec", "load_services"]

MAX_SERVICES = 64
MAX_FILE_BYTES = 1 << 20


class RequestSource(SpecModel):
    """Where a service's requests come from: a CSV of `TIMESTAMP,ContextTokens,GeneratedTokens`
    (the Azure LLM inference trace's columns), its arrival rate times `rateScale`."""

    trace: str = Field(min_length=1, description="The request trace CSV (relative to the file).")
    rate_scale: float = Field(default=1.0, gt=0, le=1_000_000,
                              description="Arrival rate multiplier (K independent copies).")
    loop: bool = Field(default=True, description="Repeat the trace until the service ends.")


class ServiceSpec(SpecModel):
    """One service: an InferenceJob's spec plus its requests."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    model: str = Field(description="A catalogued model: " + ", ".join(sorted(MODELS)))
    chips_per_replica: int = Field(ge=1, le=4096, strict=True)
    precision: Precision = Field(default=Precision.BF16)
    priority: int = Field(default=100, strict=True, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    preemptible: bool = Field(default=False, strict=True)
    profile: str = Field(default="", description="The profile whose figures price a replica "
                         "(default: the fleet's first).")
    replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS, strict=True,
                                 description="Fixed replicas; with autoscaling, the count to "
                                 "start with.")
    autoscaling: Autoscaling | None = None
    duration_seconds: int = Field(ge=60, le=31_536_000, strict=True)
    start_seconds: float = Field(default=0.0, ge=0, le=31_536_000,
                                 description="When it starts, after the replay's start.")
    requests: RequestSource

    @model_validator(mode="after")
    def _sized(self) -> ServiceSpec:
        if self.model.lower() not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; known models: "
                             f"{', '.join(sorted(MODELS))}")
        if self.autoscaling is None and self.replicas is None:
            raise ValueError("give replicas (fixed) or autoscaling")
        a = self.autoscaling
        if a is not None and self.replicas is not None and not (
                a.min_replicas <= self.replicas <= a.max_replicas):
            raise ValueError("replicas (the count to start with) must be within "
                             "autoscaling.minReplicas and maxReplicas")
        return self


def _where(error: Any) -> str:
    return ".".join(str(p) for p in error.get("loc", ()) if p != "__root__")


def load_services(path: str | Path) -> list[ServiceSpec]:
    """The services of a YAML file (a list, or a mapping with `services:`). Raises ValueError
    with one sentence naming the entry and field at fault; request trace paths are made
    relative to the file."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{p} is larger than {MAX_FILE_BYTES // 1024} KiB")
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {p}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{p} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(doc, dict) and set(doc) == {"services"}:
        doc = doc["services"]
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{p} must hold a non-empty list of services (or `services:` with one)")
    if len(doc) > MAX_SERVICES:
        raise ValueError(f"{p} holds {len(doc)} services; at most {MAX_SERVICES}")
    specs: list[ServiceSpec] = []
    for i, entry in enumerate(doc):
        label = entry.get("name") if isinstance(entry, dict) else None
        label = f"service {label!r}" if isinstance(label, str) else f"entry {i + 1}"
        if not isinstance(entry, dict):
            raise ValueError(f"{label} of {p} is not a mapping")
        try:
            spec = ServiceSpec.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = _where(first)
            msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            raise ValueError(f"{label} of {p}: {where + ': ' if where else ''}{msg}") from None
        trace = Path(spec.requests.trace)
        if not trace.is_absolute():
            spec.requests.trace = str(p.parent / trace)
        specs.append(spec)
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{p} names service(s) twice: {', '.join(dup)}")
    return specs
