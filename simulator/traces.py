"""Job traces: CSV rows -> validated `TraceJob`s, every bad row named by its line.

Why strict: a replay that silently drops rows reports a different workload
than the one the user gave it. Parsing collects every problem (with its line
number and field) so the user can fix the file in one pass; the CLI refuses to
run while any row is bad unless `--skip-bad-rows` is given, which still lists
them in the summary.

Columns: `job_id,submission_time,duration,num_gpu` (the ITP traces) plus the
optional `kind,priority,topology,model,precision`. `topology` is a required
level (`server`, `rack`, `ultraserver`, `network-1`, ...) or empty; `model` is
a size in billions of parameters (`70`, `70b`) or empty.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("job_id", "submission_time", "duration", "num_gpu")
OPTIONAL = ("kind", "priority", "topology", "model", "precision")
KINDS = ("training", "inference")
LEVELS = ("server", "rack", "ultraserver", "cluster")
PRECISIONS = ("MXFP4", "MXFP8", "FP8", "BF16", "FP16", "TF32", "FP32")


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    kind: str = "training"
    priority: int = 0
    topology: str | None = None
    model_b: float | None = None
    precision: str = "BF16"
    line: int = 0


@dataclass(frozen=True, slots=True)
class BadRow:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class TraceError(ValueError):
    """The trace has bad rows; `rows` lists each with its line number."""

    def __init__(self, path: str, rows: list[BadRow]) -> None:
        self.rows = rows
        shown = "; ".join(str(r) for r in rows[:20])
        more = f" (and {len(rows) - 20} more)" if len(rows) > 20 else ""
        super().__init__(f"{path}: {len(rows)} bad row(s): {shown}{more}")


def _number(raw: str, name: str, *, integer: bool = False) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {raw!r}")
    if integer and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {raw!r}")
    return value


def _level(raw: str) -> str | None:
    if not raw:
        return None
    low = raw.strip().lower()
    if low == "block":
        return "network-1"
    if low in LEVELS or (low.startswith("network-") and low[8:].isdigit()):
        return low
    raise ValueError(f"topology must be one of server, rack, ultraserver, network-N, cluster; got {raw!r}")


def parse_row(row: dict[str, str], line: int) -> TraceJob:
    """One CSV row -> TraceJob; raises ValueError naming the field."""
    def get(key: str) -> str:
        return (row.get(key) or "").strip()

    job_id = get("job_id")
    if not job_id:
        raise ValueError("job_id is empty")
    submit = _number(get("submission_time"), "submission_time")
    duration = _number(get("duration"), "duration")
    gpus = _number(get("num_gpu"), "num_gpu", integer=True)
    if submit < 0:
        raise ValueError(f"submission_time must be >= 0, got {submit:g}")
    if duration <= 0:
        raise ValueError(f"duration must be > 0, got {duration:g}")
    if gpus < 1:
        raise ValueError(f"num_gpu must be >= 1, got {gpus:g}")
    kind = get("kind").lower() or "training"
    if kind not in KINDS:
        raise ValueError(f"kind must be training or inference, got {kind!r}")
    prio = int(_number(get("priority"), "priority", integer=True)) if get("priority") else 0
    model_raw = get("model").lower().removesuffix("b")
    model = _number(model_raw, "model") if model_raw else None
    if model is not None and model <= 0:
        raise ValueError(f"model must be a positive size in billions, got {get('model')!r}")
    precision = get("precision").upper() or "BF16"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return TraceJob(job_id, submit, duration, int(gpus), kind, prio, _level(get("topology")),
                    model, precision, line)


def parse_rows(lines: Iterable[str], path: str = "<trace>") -> tuple[list[TraceJob], list[BadRow]]:
    """Parse CSV text; returns the good jobs and every bad row (never raises for rows)."""
    reader = csv.DictReader(lines)
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceError(path, [BadRow(1, f"header lacks column(s) {', '.join(missing)}")])
    reader.fieldnames = header
    jobs: list[TraceJob] = []
    bad: list[BadRow] = []
    seen: set[str] = set()
    for row in reader:
        line = reader.line_num
        if None in row:
            bad.append(BadRow(line, "row has more fields than the header"))
            continue
        try:
            job = parse_row(row, line)
        except ValueError as exc:
            bad.append(BadRow(line, str(exc)))
            continue
        if job.job_id in seen:
            bad.append(BadRow(line, f"job_id {job.job_id!r} appears twice"))
            continue
        seen.add(job.job_id)
        jobs.append(job)
    return jobs, bad


def load_trace(path: str | Path, *, prefix: str = "") -> tuple[list[TraceJob], list[BadRow]]:
    """Read a trace file; `prefix` keeps job ids unique when several files are merged."""
    p = Path(path)
    with p.open(newline="", encoding="utf-8") as fh:
        jobs, bad = parse_rows(fh, str(p))
    if prefix:
        jobs = [TraceJob(prefix + j.job_id, *_rest(j)) for j in jobs]
    return jobs, bad


def _rest(j: TraceJob) -> tuple[float, float, int, str, int, str | None, float | None, str, int]:
    return (j.submit_s, j.duration_s, j.gpus, j.kind, j.priority, j.topology, j.model_b,
            j.precision, j.line)
