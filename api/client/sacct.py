"""`accounting`: sacct's columns and times, from the REST API's accounting rows.

Why sacct's look: the people who read accounting come from Slurm. Times are
`YYYY-MM-DDTHH:MM:SS` (UTC) and durations `[D-]HH:MM:SS`, as sacct prints them, and
`--format` takes sacct's comma-separated list of fields, each optionally `%WIDTH`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ultraplane.api.client.transports import ClientError


def when(t_s: float | None) -> str:
    """sacct's time: `2026-12-07T01:02:03` (UTC), `Unknown` when absent."""
    if t_s is None:
        return "Unknown"
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def duration(seconds: float | None) -> str:
    """sacct's elapsed time: `02:03:04`, or `1-02:03:04` past a day."""
    if seconds is None:
        return ""
    s = max(0, round(seconds))
    days, s = divmod(s, 86_400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _elapsed(row: dict[str, Any]) -> float | None:
    """Finished: end - start. Running: its chip-hours per chip, which the server counts on its
    own clock (simulated time in the embedded fleet), not this machine's."""
    start, end = row.get("startedS"), row.get("finishedS")
    if start is None:
        return None
    if end is not None:
        return float(end) - float(start)
    chips = int(row.get("chips") or 0)
    return float(row.get("chipHours") or 0.0) * 3600.0 / chips if chips else None


FIELDS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    # sacct-style name -> (heading, value)
    "jobid": ("JobID", lambda r: str(r.get("jobUid") or "")[:8]),
    "jobname": ("JobName", lambda r: str(r.get("name") or "")),
    "namespace": ("Namespace", lambda r: str(r.get("namespace") or "")),
    "kind": ("Kind", lambda r: str(r.get("kind") or "")),
    "state": ("State", lambda r: str(r.get("phase") or "").upper()),
    "chips": ("Chips", lambda r: str(r.get("chips") or 0)),
    "submit": ("Submit", lambda r: when(r.get("submittedS"))),
    "start": ("Start", lambda r: when(r.get("startedS"))),
    "end": ("End", lambda r: when(r.get("finishedS"))),
    "elapsed": ("Elapsed", lambda r: duration(_elapsed(r))),
    "planned": ("Planned", lambda r: duration(
        None if r.get("startedS") is None or r.get("submittedS") is None
        else r["startedS"] - r["submittedS"])),
    "chiphours": ("ChipHours", lambda r: f"{float(r.get('chipHours') or 0):.2f}"),
    "energykwh": ("EnergyKWh", lambda r: f"{float(r.get('energyKWh') or r.get('energyKwh') or 0):.3f}"),
    "completion": ("Completion", lambda r: duration(r.get("completionTimeS"))),
}
DEFAULT_FORMAT = "jobid,jobname,namespace,kind,state,chips,start,end,elapsed,chiphours,energykwh"


def columns(spec: str) -> list[tuple[str, int | None]]:
    """`jobname%20,state` -> [(field, width)]; an unknown field is exit 2 naming the known."""
    out: list[tuple[str, int | None]] = []
    for raw in spec.split(","):
        name, _, width = raw.strip().partition("%")
        key = name.lower()
        if key not in FIELDS:
            raise ClientError(f"--format: unknown field {name!r}; use "
                              f"{', '.join(FIELDS)}.", 2)
        if width and not (width.isdigit() and 0 < int(width) <= 200):
            raise ClientError(f"--format: width {width!r} of {name} is not 1..200.", 2)
        out.append((key, int(width) if width else None))
    return out


NUMERIC = frozenset({"chips", "chiphours", "energykwh"})


def render(rows: Sequence[dict[str, Any]], spec: str, *, parsable: bool = False) -> str:
    """sacct's table: headings, a dashed rule, padded columns (cut to `%WIDTH`, numbers
    right-aligned); `parsable`: `|`-separated with no padding, as `sacct -P`."""
    cols = columns(spec)
    heads = [FIELDS[k][0] for k, _ in cols]
    cells = [[FIELDS[k][1](r) for k, _ in cols] for r in rows]
    if parsable:
        return "\n".join("|".join(line) for line in [heads, *cells])
    widths = [w or max([len(h), *(len(c[i]) for c in cells)])
              for i, ((_, w), h) in enumerate(zip(cols, heads, strict=True))]

    def line(values: Sequence[str], head: bool = False) -> str:
        return " ".join(
            v[:w].rjust(w) if k in NUMERIC and not head else v[:w].ljust(w)
            for v, w, (k, _) in zip(values, widths, cols, strict=True)).rstrip()

    return "\n".join([line(heads, True), " ".join("-" * w for w in widths),
                      *(line(c) for c in cells)])
