"""Read a TrainingJob / InferenceJob spec into the few numbers the runtime needs.

Why a reader instead of using the pydantic models directly: the runtime gets
specs as `ultraplane.resources` models from the REST API and as raw dict bodies
from the Kubernetes watch; both spell fields in camelCase on the wire and may
use snake_case attributes in Python. One tolerant reader keeps the runtime
independent of which side handed it the spec, and the defaults are those of
docs/resources.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ultraplane.documents.jobspecs import failure_policy_of

OUTPUT_TOKENS_PER_REQUEST = 256  # assumption: turns a requests/s load into tokens/s


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def field(obj: Any, name: str, default: Any = None) -> Any:
    """`obj.name` / `obj.snake_name` / `obj["name"]`, whichever exists, else `default`."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        value = obj.get(name, obj.get(_snake(name)))
    else:
        value = getattr(obj, _snake(name), getattr(obj, name, None))
    if value is None:
        return default
    return value.value if isinstance(value, Enum) else value


@dataclass(frozen=True)
class JobShape:
    kind: str  # "training" | "inference"
    precision: str
    params_b: float | None
    steps: int  # training: steps to run; inference: 0
    tokens_per_step: float | None
    duration_s: float | None  # training work by duration, or an inference run length
    checkpoint_interval_s: float
    failure_policy: str
    replicas: int
    load_tokens_per_s: float | None
    tpot_slo_ms: float | None
    ttft_slo_ms: float | None


def read_spec(spec: Any) -> JobShape:
    """The runtime's view of a spec (model object or dict)."""
    precision = str(field(spec, "precision", "BF16")).upper()
    model = field(spec, "model")
    params_b = field(model, "parametersBillions")
    inference = field(spec, "replicas") is not None or field(spec, "chipsPerReplica") is not None
    if inference:
        load = field(spec, "load")
        tps = field(load, "tokensPerSecond")
        rps = field(load, "requestsPerSecond")
        if tps is None and rps is not None:
            tps = float(rps) * OUTPUT_TOKENS_PER_REQUEST
        slo = field(spec, "latencySLO") or field(spec, "latency_slo")
        duration = field(spec, "durationSeconds")
        return JobShape("inference", precision, _opt(params_b), 0, None, _opt(duration), 0.0,
                        _policy("InferenceJob", spec), int(field(spec, "replicas", 1)), _opt(tps),
                        _opt(field(slo, "timePerOutputTokenMs")), _opt(field(slo, "timeToFirstTokenMs")))
    work = field(spec, "work")
    steps = field(work, "steps")
    duration = field(work, "durationSeconds")
    if steps is None and duration is None:
        duration = field(spec, "durationSeconds")
    if steps is None and duration is None:
        raise ValueError("spec.work needs steps or durationSeconds")
    return JobShape(
        "training", precision, _opt(params_b), int(steps or 0), _opt(field(work, "tokensPerStep")),
        _opt(duration), float(field(spec, "checkpointIntervalSeconds", 600.0)),
        _policy("TrainingJob", spec), 1, None, None, None,
    )


def _policy(kind: str, spec: Any) -> str:
    """The failure policy as the core reads it (`ultraplane.documents.jobspecs`: an InferenceJob's is
    ReplaceAffected, per replica), so the runtime never reads it another way."""
    return str(failure_policy_of(kind, {"failurePolicy": field(spec, "failurePolicy")}).value)


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)
