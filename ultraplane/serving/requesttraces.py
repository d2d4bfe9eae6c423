"""The request trace the simulated model servers replay, and the steps of its rate.

Why a trace given to the simulator and not a load in the job's spec: on a real cluster the
load comes from the clients, not from the InferenceJob, and the operator must learn it from
the model servers' metrics. The trace is the Azure LLM inference format (`TIMESTAMP`,
`ContextTokens`, `GeneratedTokens`); it loops when it ends. Rate steps (`0:1,120:3,300:0.5`:
from each second of the replay, that multiple of the trace's rate) let a test step the load.
A multiple keeps the trace's shape: request i is offered floor((i+1)s) - floor(is) times.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["RateSteps", "RequestTrace"]

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """Arrival offsets (seconds from the first request) with their prompt and output tokens."""

    offsets: Floats
    prompts: Ints
    outputs: Ints

    @classmethod
    def load(cls, path: Path) -> RequestTrace:
        """Read an Azure CSV; ValueError with a sentence on a file that is not one."""
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not set(COLUMNS) <= set(reader.fieldnames):
                raise ValueError(f"{path}: a request trace needs the columns "
                                 f"{', '.join(COLUMNS)}")
            rows = list(reader)
        if not rows:
            raise ValueError(f"{path}: the request trace has no requests")
        try:
            stamps = [datetime.fromisoformat(r["TIMESTAMP"].strip()[:26]) for r in rows]
            prompts = np.array([int(r["ContextTokens"]) for r in rows], dtype=np.int64)
            outputs = np.array([int(r["GeneratedTokens"]) for r in rows], dtype=np.int64)
        except ValueError as exc:
            raise ValueError(f"{path}: bad request row ({exc})") from None
        offsets = np.array([(s - stamps[0]).total_seconds() for s in stamps])
        order = np.argsort(offsets, kind="stable")
        return cls(offsets[order], np.maximum(prompts[order], 1), np.maximum(outputs[order], 1))

    @property
    def duration_s(self) -> float:
        """One loop: the last arrival plus the mean gap, so loops do not pile up."""
        n = self.offsets.size
        return float(self.offsets[-1] + (self.offsets[-1] / max(n - 1, 1) or 1.0))

    def between(self, t0: float, t1: float, scale: float = 1.0) -> tuple[Ints, Ints]:
        """Prompt and output tokens of the requests offered in [t0, t1) of the replay."""
        if t1 <= t0 or scale <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        d = self.duration_s
        idx: list[Ints] = []
        for k in range(int(t0 // d), int(t1 // d) + 1):
            lo = np.searchsorted(self.offsets, t0 - k * d, side="left")
            hi = np.searchsorted(self.offsets, t1 - k * d, side="left")
            i = np.arange(lo, hi, dtype=np.int64) + k * self.offsets.size
            times = np.floor((i + 1) * scale) - np.floor(i * scale)
            idx.append(np.repeat(i % self.offsets.size, times.astype(np.int64)))
        chosen = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        return self.prompts[chosen], self.outputs[chosen]


@dataclass(frozen=True)
class RateSteps:
    """The trace's rate multiple from each step's start (seconds of the replay) on."""

    steps: tuple[tuple[float, float], ...] = ((0.0, 1.0),)

    @classmethod
    def parse(cls, text: str) -> RateSteps:
        """`"0:1,120:3"`; ValueError with a sentence on anything else."""
        steps: list[tuple[float, float]] = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            at, _, scale = part.partition(":")
            try:
                step = (float(at), float(scale))
            except ValueError:
                raise ValueError(f"rate step {part!r} is not SECONDS:MULTIPLE") from None
            if step[0] < 0 or step[1] < 0:
                raise ValueError(f"rate step {part!r} has a negative time or multiple")
            steps.append(step)
        if not steps:
            raise ValueError("rate steps need at least one SECONDS:MULTIPLE")
        return cls(tuple(sorted(steps)))

    def at(self, t: float) -> float:
        scale = self.steps[0][1] if t >= self.steps[0][0] else 1.0
        for start, s in self.steps:
            if t >= start:
                scale = s
        return scale
