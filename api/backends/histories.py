"""Each InferenceJob's recent past: offered load, replicas and p99 TTFT, a bounded series.

Why the API keeps it: a job's status says only where it stands now, and the dashboard's
chart of an inference service (`GET .../inferencejobs/{name}/history`) needs where it has
been. So each backend appends a sample from the job's status whenever a charted figure
changes, and at least every `every_s` while nothing does (so a flat line still advances).
A series is a ring of `samples` entries and at most `jobs` series are kept (the least
recently sampled go first), so memory stays bounded however long the server runs. Series
are keyed by the job's uid: a job deleted and created again under its name starts afresh.

What a sample holds comes from the status alone: `status.load` (requests/s and `ttftP99Ms`)
when the fleet reports observed load, else no load (the page then says "no load reported");
replicas wanted (`desiredReplicas`, else `spec.replicas`), placed (`replicas`) and ready
(`readyReplicas`, else the placed ones where no pods report readiness). The objective is the
job's `spec.autoscaling.objective` TTFT, else its `latencySLO`'s.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from ultraplane.documents.conversions import HOLDING_PHASES

SAMPLES = 720  # 1 h at one sample per 5 s, more when figures change often
JOBS = 5000
EVERY_S = 5.0
FIGURES = ("requestsPerSecond", "desiredReplicas", "replicas", "readyReplicas", "ttftP99Ms")


def sample_of(status: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The charted figures of one InferenceJob now (None: not reported)."""
    load = status.get("load") or {}
    placed = status.get("replicas")
    ready = status.get("readyReplicas")
    desired = status.get("desiredReplicas")
    return {
        "requestsPerSecond": _number(load.get("requestsPerSecond")),
        "desiredReplicas": int(desired if desired is not None else spec.get("replicas", 1)),
        "replicas": int(placed or 0),
        "readyReplicas": int(ready if ready is not None else placed or 0),
        "ttftP99Ms": _number(load.get("ttftP99Ms")),
    }


def objective_ms(spec: Mapping[str, Any]) -> float | None:
    """The p99 TTFT the job is held to: its autoscaling objective, else its latencySLO."""
    objective = (spec.get("autoscaling") or {}).get("objective") or {}
    slo = spec.get("latencySLO") or {}
    return _number(objective.get("timeToFirstTokenMs", slo.get("timeToFirstTokenMs")))


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


class InferenceHistories:
    """Bounded series of samples per InferenceJob uid; safe to call from any thread."""

    def __init__(self, *, samples: int = SAMPLES, jobs: int = JOBS, every_s: float = EVERY_S
                 ) -> None:
        self.samples, self.jobs, self.every_s = samples, jobs, every_s
        self._series: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, uid: str, t_s: float, status: Mapping[str, Any],
                spec: Mapping[str, Any]) -> None:
        """Append a sample at `t_s` if a figure changed or `every_s` passed since the last."""
        sample = sample_of(status, spec)
        with self._lock:
            series = self._series.get(uid)
            if series is None:
                series = self._series[uid] = deque(maxlen=self.samples)
                while len(self._series) > self.jobs:
                    self._series.popitem(last=False)
            elif series:
                last = series[-1]
                same = all(last[k] == sample[k] for k in FIGURES)
                if t_s < last["t"] or (same and t_s - last["t"] < self.every_s):
                    return
            self._series.move_to_end(uid)
            series.append({"t": round(t_s, 3), **sample})

    def observe_jobs(self, t_s: float, jobs: Iterable[Mapping[str, Any]]
                     ) -> list[dict[str, Any]]:
        """Sample every InferenceJob holding chips among `jobs` (wire objects); their figures
        now, one row each (namespace, name, the sample, the objective), for the metrics."""
        rows = []
        for job in jobs:
            status, spec = job.get("status") or {}, job.get("spec") or {}
            if status.get("phase") not in HOLDING_PHASES:
                continue
            meta = job["metadata"]
            self.observe(str(meta.get("uid") or ""), t_s, status, spec)
            rows.append({"namespace": meta["namespace"], "name": meta["name"],
                         **sample_of(status, spec), "ttftObjectiveMs": objective_ms(spec)})
        return rows

    def series(self, uid: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._series.get(uid, ()))

    def forget(self, uid: str) -> None:
        with self._lock:
            self._series.pop(uid, None)


def history_document(job: Mapping[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The `GET .../history` body: the job's identity, its objective and its samples."""
    meta = job["metadata"]
    spec = job.get("spec") or {}
    return {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "InferenceJobHistory",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": meta.get("uid")},
            "ttftObjectiveMs": objective_ms(spec), "samples": samples}
