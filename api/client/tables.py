"""Output in kubectl's look: `-o table|wide|json|yaml|name`.

Why hand-written rather than rich's tables: kubectl prints plain columns (upper-case headers,
left-aligned, three spaces apart, no box drawing) that scripts cut with awk; rich draws boxes
and wraps to the terminal. Ages read as kubectl's (`45s`, `5m`, `3h`, `2d`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

OUTPUTS = ("table", "wide", "json", "yaml", "name")


def age(stamp: str | None, now_s: float) -> str:
    """kubectl's AGE: `<unknown>` without a timestamp, else the largest unit (`5m`, `3h12m`)."""
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return span(max(0.0, now_s - then.timestamp()))


def span(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns left-aligned, three spaces apart, as kubectl prints them."""
    cells = [[str(h).upper() for h in headers]] + [
        ["<none>" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def document(items: list[dict[str, Any]], output: str, *, single: bool) -> str:
    """json/yaml: one object as itself, several as a kubectl `List`."""
    body: Any = items[0] if single and len(items) == 1 else {
        "apiVersion": "v1", "kind": "List", "items": items}
    if output == "json":
        return json.dumps(body, indent=2)
    return yaml.safe_dump(body, sort_keys=False).rstrip()


def resource_name(item: dict[str, Any]) -> str:
    """`-o name`: `trainingjob.ultraplane.dev/NAME`, as kubectl prints custom resources."""
    kind = str(item.get("kind") or "UltraServer").lower()
    return f"{kind}.ultraplane.dev/{(item.get('metadata') or {}).get('name', item.get('name'))}"
