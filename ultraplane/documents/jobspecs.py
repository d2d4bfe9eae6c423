"""One reading of a job, whoever hands it over: a Kubernetes body or a REST/pydantic spec.

Why one reader: the operator, the embedded REST backend, the Kubernetes-mode REST backend and
the simulator each read a job's key, queue entry, failure policy and parts their own way, and
the copies drifted (one policy default for InferenceJobs here, another there). Every adapter
now reads a job through `read_job` (a spec in wire form or a pydantic model) or `read_body`
(a whole custom-resource body), and gets the same `JobRead`.

The rules:
- The key is `tj/<ns>/<name>` or `ij/<ns>/<name>` (`ultraplane.ids.job_key`); a job's parts are
  the allocator keys holding its chips: the key itself, or `<key>#i` per InferenceJob replica.
- The queue entry is `conversions.queued_job`; a spec the core cannot honour is `error` (one
  sentence naming the field), never an exception.
- The failure policy is a `FailurePolicy`: a TrainingJob's `spec.failurePolicy` (RestartAll when
  absent or unknown); an InferenceJob has none and is `ReplaceAffected`, applied per replica
  (a replica on a failed chip is placed again; the job restarts only when none fits).
- The work (`read_work`: precision, model size, steps or duration, load and latency objective)
  is what a runtime models the job's speed and draw from (the simulator's plans). The kind is
  the caller's, never guessed from which fields a spec has; defaults are docs/resources.md's.
- An InferenceJob's `spec.autoscaling` is an `AutoscalingRead` (the planner's bounds and
  objective); a malformed one is `error`, as any field the core cannot honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from ultraplane.documents.conversions import (
    InvalidJobError,
    creation_seconds,
    creation_seq,
    queued_job,
    replica_chips,
)
from ultraplane.ids import ChipId, JobKey, job_key
from ultraplane.resources.trainingjobs import FailurePolicy
from ultraplane.workloads import QueuedJob

__all__ = ["AutoscalingRead", "JobRead", "JobWork", "autoscaling_of", "expected_end",
           "failure_policy_of", "read_body", "read_job", "read_work", "wire_spec"]

Spec = Mapping[str, Any] | BaseModel


@dataclass(frozen=True, slots=True)
class AutoscalingRead:
    """An InferenceJob's `spec.autoscaling`: the core owns its replica count within
    [min_replicas, max_replicas], sized so the p99 objective holds."""

    min_replicas: int
    max_replicas: int
    ttft_ms: float
    tpot_ms: float
    scale_down_delay_s: float = 300.0


def autoscaling_of(spec: Mapping[str, Any]) -> AutoscalingRead | None:
    """`spec.autoscaling` read, None when unset; raises `InvalidJobError` naming the field."""
    raw = spec.get("autoscaling")
    if raw is None:
        return None
    try:
        objective = raw.get("objective") or {}
        read = AutoscalingRead(int(raw.get("minReplicas", 1)), int(raw["maxReplicas"]),
                               float(objective["timeToFirstTokenMs"]),
                               float(objective["timePerOutputTokenMs"]),
                               float(raw.get("scaleDownDelaySeconds", 300)))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidJobError(f"spec.autoscaling: missing or malformed field ({exc})") from exc
    if not 1 <= read.min_replicas <= read.max_replicas:
        raise InvalidJobError("spec.autoscaling: minReplicas must be at least 1 and at most "
                              "maxReplicas")
    if read.ttft_ms <= 0 or read.tpot_ms <= 0 or read.scale_down_delay_s < 0:
        raise InvalidJobError("spec.autoscaling: the objective must be positive and "
                              "scaleDownDelaySeconds not negative")
    return read


@dataclass(frozen=True, slots=True)
class JobRead:
    """What every adapter needs from one job; `chips` / `replica_chips` come from its status
    (the whole allocation, and each replica's chips of an InferenceJob by index)."""

    key: JobKey
    kind: str
    namespace: str
    name: str
    queued: QueuedJob | None
    error: str | None
    failure_policy: FailurePolicy
    parts: tuple[JobKey, ...]
    chips: tuple[ChipId, ...] = ()
    replica_chips: tuple[tuple[ChipId, ...], ...] = ()
    autoscaling: AutoscalingRead | None = None

    @property
    def replicated(self) -> bool:
        return self.kind == "InferenceJob"

    @property
    def priority(self) -> int:
        """Its priority (0 for a spec the core cannot queue: it holds nothing to protect)."""
        return self.queued.priority if self.queued is not None else 0

    @property
    def preemptible(self) -> bool:
        return self.queued.preemptible if self.queued is not None else True

    @property
    def queue(self) -> str | None:
        """The tenant queue it names (None: its namespace's default, if any)."""
        return self.queued.queue if self.queued is not None else None

    @property
    def size(self) -> int:
        """Chips it asks for, every replica together (0 for a spec the core cannot queue)."""
        if self.queued is None:
            return 0
        return self.queued.request.chips * len(self.parts)


def wire_spec(spec: Spec) -> Mapping[str, Any]:
    """A spec as the wire spells it (camelCase, unset fields left out)."""
    if isinstance(spec, BaseModel):
        dumped: dict[str, Any] = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return spec


def failure_policy_of(kind: str, spec: Mapping[str, Any]) -> FailurePolicy:
    if kind != "TrainingJob":
        return FailurePolicy.REPLACE_AFFECTED
    try:
        return FailurePolicy(str(spec.get("failurePolicy") or FailurePolicy.RESTART_ALL))
    except ValueError:
        return FailurePolicy.RESTART_ALL


def read_job(kind: str, namespace: str, name: str, spec: Spec, *, seq: int = 0,
             created_s: float | None = None,
             status: Mapping[str, Any] | None = None) -> JobRead:
    """Read one job; never raises (a spec the core cannot schedule is in `error`)."""
    wire = wire_spec(spec)
    key = job_key(kind, namespace, name)
    queued: QueuedJob | None = None
    error: str | None = None
    autoscaling: AutoscalingRead | None = None
    try:
        queued = queued_job(kind, namespace, name, wire, seq, created_s)
        if kind == "InferenceJob":
            autoscaling = autoscaling_of(wire)
    except InvalidJobError as exc:
        error = str(exc)
        queued = None
    allocation = (status or {}).get("allocation") or {}
    per_replica = replica_chips(allocation) if kind == "InferenceJob" else ()
    chips = tuple(ChipId(c) for c in allocation.get("chips") or [])
    if per_replica:
        chips = tuple(dict.fromkeys(c for r in per_replica for c in r))
    parts = queued.parts() if queued is not None else (key,)
    return JobRead(key, kind, namespace, name, queued, error, failure_policy_of(kind, wire),
                   parts, chips, per_replica, autoscaling)


def read_body(body: Mapping[str, Any], kind: str) -> JobRead:
    """Read a TrainingJob or InferenceJob custom-resource body (metadata, spec, status)."""
    meta = body.get("metadata") or {}
    return read_job(kind, str(meta.get("namespace", "")), str(meta.get("name", "")),
                    body.get("spec") or {}, seq=creation_seq(meta),
                    created_s=creation_seconds(meta), status=body.get("status") or {})


@dataclass(frozen=True, slots=True)
class JobWork:
    """What a job asks the hardware to do, as a runtime models it: a TrainingJob's steps (of
    `tokens_per_step` tokens) or duration, between checkpoints; an InferenceJob's replicas
    serving a load (tokens or requests per second) under a latency objective."""

    kind: str  # TrainingJob | InferenceJob
    precision: str
    params_b: float | None  # model.parametersBillions
    steps: int  # a TrainingJob's steps to run (0: work by duration, and every InferenceJob)
    tokens_per_step: float | None
    duration_s: float | None  # a TrainingJob's work by duration, or an inference run's length
    checkpoint_interval_s: float  # 0 for an InferenceJob
    failure_policy: FailurePolicy
    replicas: int
    load_tokens_per_s: float | None = None
    load_requests_per_s: float | None = None
    tpot_slo_ms: float | None = None
    ttft_slo_ms: float | None = None

    @property
    def replicated(self) -> bool:
        return self.kind == "InferenceJob"


def read_work(kind: str, spec: Spec) -> JobWork:
    """The work of a `kind` job's spec (wire form or pydantic model); InvalidJobError naming
    the field when a TrainingJob's work gives neither steps nor a duration."""
    wire = wire_spec(spec)
    precision = str(wire.get("precision") or "BF16").upper()
    params_b = _number(_block(wire, "model").get("parametersBillions"))
    policy = failure_policy_of(kind, wire)
    if kind == "InferenceJob":
        load, slo = _block(wire, "load"), _block(wire, "latencySLO")
        return JobWork(kind, precision, params_b, 0, None, _number(wire.get("durationSeconds")),
                       0.0, policy, int(wire.get("replicas") or 1),
                       load_tokens_per_s=_number(load.get("tokensPerSecond")),
                       load_requests_per_s=_number(load.get("requestsPerSecond")),
                       tpot_slo_ms=_number(slo.get("timePerOutputTokenMs")),
                       ttft_slo_ms=_number(slo.get("timeToFirstTokenMs")))
    work = _block(wire, "work")
    steps, duration = work.get("steps"), work.get("durationSeconds")
    if steps is None and duration is None:
        raise InvalidJobError("spec.work needs steps or durationSeconds")
    interval = wire.get("checkpointIntervalSeconds")
    return JobWork(kind, precision, params_b, int(steps or 0),
                   _number(work.get("tokensPerStep")), _number(duration),
                   600.0 if interval is None else float(interval), policy, 1)


def _block(wire: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = wire.get(name)
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def expected_end(status: Mapping[str, Any], now: datetime) -> float | None:
    """A running job's predicted end (epoch seconds) from its progress: the time since
    `startTime` scaled by what is left of `progressPercent`. None before any progress (the
    scheduler then keeps its admission-time prediction from `work`, if it made one)."""
    start, percent = status.get("startTime"), status.get("progressPercent")
    if not isinstance(start, str) or not isinstance(percent, int | float) or not 0 < percent <= 100:
        return None
    try:
        began = datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        return None
    if began.tzinfo is None:
        began = began.replace(tzinfo=UTC)
    clock = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    elapsed = (clock - began).total_seconds()
    if elapsed <= 0:
        return None
    return clock.timestamp() + elapsed * (100.0 - float(percent)) / float(percent)
