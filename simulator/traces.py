"""Job traces: CSV rows -> validated `TraceJob`s, every bad row named by its line.

Why strict: a replay that silently drops rows reports a different workload
than the one the user gave it. Parsing collects every problem (with its line
number and field) so the user can fix the file in one pass; the CLI refuses to
run while any row is bad unless `--skip-bad-rows` is given, which still lists
them in the summary.

Columns: `job_id,submission_time,duration,num_gpu` (the ITP traces) plus the
optional `kind,priority,topology,model,precision,tenant` (`tenant` names the job's queue). `topology` is a required
level (`server`, `rack`, `ultraserver`, `network-1`, ...) or empty; `model` is
a size in billions of parameters (`70`, `70b`) or empty.

Bounds keep a replay finite: times within ten years, durations within one year,
at most 1,048,576 GPUs a job, a priority within +-1,000,000. A UTF-8 byte-order
mark (every spreadsheet export has one) is skipped; broken quoting (an
unterminated quote, a NUL byte, a field over 128 KiB) stops the parse at that row,
named by its line, since nothing after it can be trusted.

A trace is a regular file of at most `MAX_TRACE_BYTES` (a device or a pipe would be read
forever), and only the first `MAX_BAD_ROWS_KEPT` bad rows are kept and shown, with the
count of all of them: a million bad rows are one screen, not 85 MB of errors.
"""

from __future__ import annotations

import csv
import math
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_TIME_S = 10 * 365 * 86400.0
MAX_DURATION_S = 366 * 86400.0
MAX_GPUS = 1_048_576
MAX_PRIORITY = 1_000_000
MAX_MODEL_B = 100_000
MAX_NETWORK_DEPTH = 16
MAX_TRACE_BYTES = 1 << 30  # 1 GiB: about 20 million rows
MAX_BAD_ROWS_KEPT = 20
REQUIRED = ("job_id", "submission_time", "duration", "num_gpu")
OPTIONAL = ("kind", "priority", "topology", "model", "precision", "tenant")
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
    tenant: str | None = None  # the tenant queue it is submitted to (`--queues`)


@dataclass(frozen=True, slots=True)
class BadRow:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class BadRows(list[BadRow]):
    """The first MAX_BAD_ROWS_KEPT bad rows of a trace; `total` counts all of them."""

    total = 0

    def add(self, row: BadRow) -> None:
        self.total += 1
        if len(self) < MAX_BAD_ROWS_KEPT:
            self.append(row)


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
    digits = low[8:]
    if low in LEVELS or (low.startswith("network-") and digits.isascii() and digits.isdigit()
                         and len(digits) <= 3 and 1 <= int(digits) <= MAX_NETWORK_DEPTH):
        return low
    raise ValueError("topology must be one of server, rack, ultraserver, network-N "
                     f"(1 <= N <= {MAX_NETWORK_DEPTH}), cluster; got {raw[:40]!r}")


def parse_row(row: dict[str, str], line: int) -> TraceJob:
    """One CSV row -> TraceJob; raises ValueError naming the field."""
    def get(key: str) -> str:
        return (row.get(key) or "").strip()

    job_id = get("job_id")
    if not job_id:
        raise ValueError("job_id is empty")
    if len(job_id) > 253 or not job_id.isprintable():
        raise ValueError("job_id must be at most 253 printable characters")
    submit = _number(get("submission_time"), "submission_time")
    duration = _number(get("duration"), "duration")
    gpus = _number(get("num_gpu"), "num_gpu", integer=True)
    if not 0 <= submit <= MAX_TIME_S:
        raise ValueError(f"submission_time must be 0..{MAX_TIME_S:g} s (ten years), got {submit:g}")
    if not 0 < duration <= MAX_DURATION_S:
        raise ValueError(f"duration must be > 0 and at most {MAX_DURATION_S:g} s (one year), "
                         f"got {duration:g}")
    if not 1 <= gpus <= MAX_GPUS:
        raise ValueError(f"num_gpu must be 1..{MAX_GPUS}, got {gpus:g}")
    kind = get("kind").lower() or "training"
    if kind not in KINDS:
        raise ValueError(f"kind must be training or inference, got {kind!r}")
    prio = int(_number(get("priority"), "priority", integer=True)) if get("priority") else 0
    if abs(prio) > MAX_PRIORITY:
        raise ValueError(f"priority must be within +-{MAX_PRIORITY}, got {prio}")
    model_raw = get("model").lower().removesuffix("b")
    model = _number(model_raw, "model") if model_raw else None
    if model is not None and not 0 < model <= MAX_MODEL_B:
        raise ValueError(f"model must be a size in billions, 0 < model <= {MAX_MODEL_B}, "
                         f"got {get('model')[:40]!r}")
    precision = get("precision").upper() or "BF16"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    tenant = get("tenant") or None
    if tenant is not None and (len(tenant) > 253 or not tenant.isprintable()):
        raise ValueError("tenant must be at most 253 printable characters")
    return TraceJob(job_id, submit, duration, int(gpus), kind, prio, _level(get("topology")),
                    model, precision, line, tenant)


def parse_rows(lines: Iterable[str], path: str = "<trace>") -> tuple[list[TraceJob], BadRows]:
    """Parse CSV text; returns the good jobs and the bad rows (never raises for rows)."""
    reader = csv.DictReader(lines, strict=True)
    try:
        fieldnames = reader.fieldnames or []
    except csv.Error as exc:
        raise TraceError(path, [BadRow(1, f"the header is not valid CSV: {exc}")]) from None
    header = [h.strip().removeprefix("\ufeff") for h in fieldnames]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceError(path, [BadRow(1, f"header lacks column(s) {', '.join(missing)}")])
    reader.fieldnames = header
    jobs: list[TraceJob] = []
    bad = BadRows()
    seen: set[str] = set()
    rows = iter(reader)
    while True:
        starts = reader.line_num + 1
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:  # broken quoting: nothing after this row can be trusted
            bad.add(BadRow(starts, f"broken CSV quoting or data ({exc}); "
                                      "the rows after it were not read"))
            break
        line = reader.line_num
        if None in row:
            bad.add(BadRow(line, "row has more fields than the header"))
            continue
        try:
            job = parse_row(row, line)
        except ValueError as exc:
            bad.add(BadRow(line, str(exc)))
            continue
        if job.job_id in seen:
            bad.add(BadRow(line, f"job_id {job.job_id!r} appears twice"))
            continue
        seen.add(job.job_id)
        jobs.append(job)
    return jobs, bad


def check_trace_file(path: Path) -> None:
    """A regular file of bounded size, or ValueError in one sentence (checked before the open:
    opening a FIFO blocks, and reading a device never ends)."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file; a trace must be a CSV file")
    if info.st_size > MAX_TRACE_BYTES:
        raise ValueError(f"{path} is {info.st_size} bytes; a trace may have at most "
                         f"{MAX_TRACE_BYTES} bytes")


def load_trace(path: str | Path, *, prefix: str = "") -> tuple[list[TraceJob], BadRows]:
    """Read a trace file; `prefix` keeps job ids unique when several files are merged."""
    p = Path(path)
    check_trace_file(p)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # swapped for a FIFO: no wait
    with open(fd, newline="", encoding="utf-8-sig", closefd=True) as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{p} is not a regular file; a trace must be a CSV file")
        jobs, bad = parse_rows(fh, str(p))
    if prefix:
        jobs = [TraceJob(prefix + j.job_id, *_rest(j)) for j in jobs]
    return jobs, bad


def _rest(j: TraceJob) -> tuple[float, float, int, str, int, str | None, float | None, str, int,
                                str | None]:
    return (j.submit_s, j.duration_s, j.gpus, j.kind, j.priority, j.topology, j.model_b,
            j.precision, j.line, j.tenant)
