"""What the client commands print about jobs and UltraServers: table rows, describe, why.

Why apart from the commands: the rows are read from documents in the REST API's vocabulary
(camelCase), whichever transport fetched them, and can be checked without a server.
"""

from __future__ import annotations

from typing import Any

from ultraplane.api.client.tables import age, span

from ultraplane.documents.jobspecs import read_body

Rows = tuple[list[str], list[list[Any]]]


def _chips(job: dict[str, Any]) -> int:
    """The job's size as its status says it (an InferenceJob's), else as the core reads its
    spec (every replica together)."""
    status = job.get("status") or {}
    if status.get("chips"):
        return int(status["chips"])
    return read_body(job, str(job.get("kind") or "TrainingJob")).size


def _ultraservers(status: dict[str, Any]) -> str:
    allocation = status.get("allocation") or {}
    names = list(allocation.get("ultraServers") or [])
    for replica in allocation.get("replicas") or []:
        names += [n for n in replica.get("ultraServers") or [] if n not in names]
    return ",".join(names)


def replicas_cell(job: dict[str, Any]) -> str | None:
    """An InferenceJob's replicas as `ready/wanted` (kubectl's READY of a Deployment): ready
    are those whose pods all run (`status.readyReplicas`; where the API runs the job itself,
    every placed replica of a Running job), wanted is `spec.replicas`. None for a
    TrainingJob."""
    if job.get("kind") != "InferenceJob":
        return None
    spec, status = job.get("spec") or {}, job.get("status") or {}
    ready = status.get("readyReplicas")
    if ready is None:
        ready = status.get("replicas") or 0 if status.get("phase") == "Running" else 0
    return f"{ready}/{spec.get('replicas', 1)}"


def load_cells(job: dict[str, Any]) -> tuple[str | None, str | None]:
    """An autoscaled InferenceJob's LOAD (requests/s its model servers reported) and TTFT-P99
    against the objective (`1,320/1,000ms`); None where not read."""
    spec, load = job.get("spec") or {}, (job.get("status") or {}).get("load") or {}
    objective = (spec.get("autoscaling") or {}).get("objective") or {}
    rate = load.get("requestsPerSecond")
    ttft, target = load.get("ttftP99Ms"), objective.get("timeToFirstTokenMs")
    p99 = None if ttft is None else f"{float(ttft):,.0f}" + (
        f"/{float(target):,.0f}ms" if target is not None else "ms")
    return (None if rate is None else f"{float(rate):,.1f}/s"), p99


def job_rows(jobs: list[dict[str, Any]], *, now_s: float, wide: bool, namespaces: bool,
             kinds: bool, replicas: bool = False) -> Rows:
    """`replicas`: a REPLICAS column (`replicas_cell`), when InferenceJobs are listed."""
    headers = (["NAMESPACE"] if namespaces else []) + ["NAME"] + (["KIND"] if kinds else []) \
        + ["PHASE"] + (["REPLICAS"] if replicas else []) + ["CHIPS", "QUEUE", "AGE"] \
        + (["LOAD", "TTFT-P99"] if replicas else []) \
        + (["PROGRESS", "ULTRASERVERS", "REASON"] if wide else [])
    rows = []
    for job in jobs:
        meta, status = job.get("metadata") or {}, job.get("status") or {}
        progress = status.get("progressPercent")
        row: list[Any] = ([meta.get("namespace")] if namespaces else []) + [meta.get("name")]
        row += [job.get("kind")] if kinds else []
        row += [status.get("phase") or "Pending"] + ([replicas_cell(job)] if replicas else [])
        row += [_chips(job), status.get("queuePosition"), age(meta.get("creationTimestamp"), now_s)]
        row += list(load_cells(job)) if replicas else []
        if wide:
            row += [None if progress is None else f"{float(progress):.0f}%",
                    _ultraservers(status), status.get("reason")]
        rows.append(row)
    return headers, rows


def ultraserver_rows(servers: list[dict[str, Any]], *, wide: bool = False,
                     top: bool = False) -> Rows:
    if top:
        headers = ["NAME", "CHIPS(USED)", "CHIPS%", "UTILIZATION", "POWER(kW)"]
        return headers, [
            [s["name"], f"{s.get('allocatedChips', 0)}/{s.get('chips', 0)}",
             f"{100 * s.get('allocatedChips', 0) / max(1, s.get('chips', 0)):.0f}%",
             f"{100 * float(s.get('utilization') or 0):.0f}%",
             f"{float(s.get('powerWatts') or 0) / 1000:.1f}"] for s in servers]
    headers = ["NAME", "PROFILE", "CHIPS", "ALLOCATED", "FREE", "FAILED", "JOBS",
               "RESERVED-FOR"] + (["SCHEDULABLE", "POWER(kW)", "NETWORK"] if wide else [])
    rows = []
    for s in servers:
        row: list[Any] = [s["name"], s.get("profile"), s.get("chips"), s.get("allocatedChips"),
                          s.get("freeChips"), len(s.get("failedChips") or ()),
                          len(s.get("jobs") or ()), _short(s.get("reservedFor"))]
        if wide:
            row += [str(bool(s.get("schedulable", True))).lower(),
                    f"{float(s.get('powerWatts') or 0) / 1000:.1f}",
                    ",".join(s.get("network") or [])]
        rows.append(row)
    return headers, rows


def queue_rows(queues: list[dict[str, Any]], *, wide: bool = False) -> Rows:
    """`kubectl get tenantqueues` columns, from the queues' specs and statuses."""
    headers = ["NAME", "COHORT", "NOMINAL", "USED", "BORROWED", "FAIR", "PENDING", "WEIGHT"] + (
        ["ADMITTED", "NAMESPACES", "DEFAULT-FOR"] if wide else [])
    rows = []
    for q in queues:
        spec, status = q.get("spec") or {}, q.get("status") or {}
        row: list[Any] = [q["metadata"]["name"], spec.get("cohort") or "<none>",
                          status.get("nominalChips", sum((spec.get("nominal") or {}).values())),
                          status.get("usedChips", 0), status.get("borrowedChips", 0),
                          _fair(status), status.get("pendingJobs", 0),
                          f"{float(spec.get('weight', 1)):g}"]
        if wide:
            allowed = spec.get("namespaces")
            row += [status.get("admittedJobs", 0),
                    "<all>" if allowed is None else ",".join(allowed) or "<none>",
                    ",".join(spec.get("defaultFor") or []) or "<none>"]
        rows.append(row)
    return headers, rows


def _fair(status: dict[str, Any]) -> str:
    """FAIR: the queue's fair share of chips, beside USED, the chips it holds ("<none>"
    without one: a queue of no cohort)."""
    share = status.get("fairShareChips")
    return "<none>" if share is None else str(share)


def budget_rows(budgets: list[dict[str, Any]], *, wide: bool = False) -> Rows:
    """`kubectl get powerbudgets` columns (kW), from the budgets' specs and statuses."""
    def kw(w: Any) -> str:
        return "-" if w is None else f"{float(w) / 1000:.1f}"

    headers = ["NAME", "LIMIT(kW)", "PREDICTED(kW)", "MEASURED(kW)", "HEADROOM(kW)", "CAPPED",
               "POLICY"] + (["PARENT", "ULTRASERVERS"] if wide else [])
    rows = []
    for b in budgets:
        spec, status = b.get("spec") or {}, b.get("status") or {}
        row: list[Any] = [b["metadata"]["name"], kw(spec.get("watts")),
                          kw(status.get("predictedWatts")), kw(status.get("measuredWatts")),
                          kw(status.get("headroomWatts")), len(status.get("capped") or ()),
                          spec.get("policy", "Predicted")]
        if wide:
            row += [spec.get("parent") or "<none>", status.get("ultraServers", "-")]
        rows.append(row)
    return headers, rows


def top_rows(jobs: list[dict[str, Any]], *, namespaces: bool) -> Rows:
    headers = (["NAMESPACE"] if namespaces else []) + ["NAME", "KIND", "CHIPS", "UTILIZATION",
                                                       "POWER(kW)", "PROGRESS"]
    rows = []
    for job in jobs:
        meta, status = job.get("metadata") or {}, job.get("status") or {}
        if status.get("phase") not in ("Running", "Admitted"):
            continue
        row: list[Any] = [meta.get("namespace")] if namespaces else []
        row += [meta.get("name"), job.get("kind"), _chips(job),
                f"{100 * float(status.get('utilization') or 0):.0f}%",
                f"{float(status.get('powerWatts') or 0) / 1000:.1f}",
                f"{float(status.get('progressPercent') or 0):.0f}%"]
        rows.append(row)
    return headers, rows


def _short(key: str | None) -> str | None:
    """`tj/ns/name` -> `ns/name` (the job key a reservation names)."""
    return None if not key else "/".join(key.split("#", 1)[0].split("/")[-2:])


def describe_job(job: dict[str, Any], *, now_s: float, why: str | None) -> str:
    meta, spec, status = (job.get(k) or {} for k in ("metadata", "spec", "status"))
    lines = [f"Name:         {meta.get('name')}", f"Namespace:    {meta.get('namespace')}",
             f"Kind:         {job.get('kind')}", f"API Version:  {job.get('apiVersion')}",
             f"Labels:       {_pairs(meta.get('labels'))}",
             f"Created:      {meta.get('creationTimestamp') or '<unknown>'} "
             f"({age(meta.get('creationTimestamp'), now_s)} ago)", "Spec:"]
    lines += _tree(spec, 2)
    lines.append("Status:")
    shown = {k: v for k, v in status.items() if k != "allocation"}
    lines += _tree(shown, 2) or ["  <none>"]
    allocation = status.get("allocation")
    if allocation:
        lines.append("Allocation:")
        lines.append(f"  UltraServers:  {_ultraservers(status)}")
        chips = list(allocation.get("chips") or []) + [
            c for r in allocation.get("replicas") or [] for c in r.get("chips") or []]
        lines.append(f"  Chips:         {len(set(chips))}")
        if allocation.get("level"):
            lines.append(f"  Level:         {allocation['level']}")
    if why:
        lines.append("Why pending:")
        lines += ["  " + line for line in why.splitlines()]
    return "\n".join(lines)


def _pairs(labels: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or "<none>"


def _tree(value: dict[str, Any], indent: int) -> list[str]:
    out = []
    for key, item in value.items():
        pad = " " * indent
        if isinstance(item, dict) and item:
            out.append(f"{pad}{key}:")
            out += _tree(item, indent + 2)
        elif isinstance(item, list) and len(item) > 8:
            out.append(f"{pad}{key}:  {', '.join(map(str, item[:8]))} ... ({len(item)} in all)")
        elif isinstance(item, list):
            out.append(f"{pad}{key}:  {', '.join(map(str, item)) or '<none>'}")
        else:
            out.append(f"{pad}{key}:  {item}")
    return out


def explanation_text(doc: dict[str, Any], *, now_s: float) -> str:
    """`why`'s text: summary, blockers, nearest UltraServers and predicted start."""
    lines = [doc.get("summary") or f"{doc.get('kind')} {doc.get('job')}"]
    blockers = doc.get("blockers") or []
    if blockers:
        lines.append("Blocked by:")
        lines += [f"  - {b['kind']}: {b['message']}" for b in blockers]
    nearest = doc.get("nearestUltraServers") or []
    if nearest:
        lines.append("Nearest UltraServers:")
        for n in nearest:
            held = ", ".join(f"{h['job']} ({h['chips']} chips"
                             + (f", ends in {span(h['predictedEndSeconds'] - doc['asOfSeconds'])}"
                                if h.get("predictedEndSeconds") and doc.get("asOfSeconds")
                                else "") + ")"
                             for h in n.get("holders") or []) or "nothing"
            short = f", {n['missingChips']} chips short" if n.get("missingChips") else ""
            reserved = f", reserved for {n['reservedFor']}" if n.get("reservedFor") else ""
            lines.append(f"  {n['name']}: {n['freeChips']} free{short}{reserved}; held by {held}")
    start = doc.get("predictedStartSeconds")
    if doc.get("phase") in ("Pending", "Preempted"):
        if start is not None and doc.get("asOfSeconds") is not None:
            lines.append(f"Predicted start: {doc.get('predictedStart')} "
                         f"(in {span(max(0.0, start - doc['asOfSeconds']))}; {doc.get('basis')})")
        else:
            lines.append(f"Predicted start: unknown ({doc.get('basis')})")
    return "\n".join(lines)


def scaling_text(job: dict[str, Any]) -> str:
    """`why` of an InferenceJob: its last scaling decision, the load it was read from, and
    the p99s against spec.autoscaling's objective ("" for a job with none of it)."""
    if job.get("kind") != "InferenceJob":
        return ""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    auto, load = spec.get("autoscaling") or {}, status.get("load") or {}
    lines = []
    if status.get("scalingMessage"):
        lines.append(f"Scaling: {status['scalingMessage']}")
    if load:
        objective = auto.get("objective") or {}

        def p99(field: str, target: str) -> str:
            said = f"{float(load[field]):,.0f} ms" if field in load else "unknown"
            return said + (f" (objective {float(objective[target]):,.0f} ms)"
                           if target in objective else "")

        tokens = (f"; {float(load['promptTokensPerRequest']):,.0f} prompt and "
                  f"{float(load.get('outputTokensPerRequest', 0)):,.0f} output tokens a request"
                  if "promptTokensPerRequest" in load else "")
        within = (f"; {100 * float(load['sloAttainment']):.1f}% of requests within both"
                  if "sloAttainment" in load else "")
        lines.append(f"Load: {float(load.get('requestsPerSecond', 0)):,.1f} req/s{tokens}; "
                     f"p99 TTFT {p99('ttftP99Ms', 'timeToFirstTokenMs')}, TPOT "
                     f"{p99('tpotP99Ms', 'timePerOutputTokenMs')}{within}")
    if auto or status.get("desiredReplicas") is not None:
        bounds = (f" (autoscaling {auto.get('minReplicas', 1)}-{auto.get('maxReplicas')}, "
                  f"scale-down delay {auto.get('scaleDownDelaySeconds', 300)} s)" if auto else "")
        lines.append(f"Replicas: {spec.get('replicas', 1)} wanted, "
                     f"{status.get('desiredReplicas', spec.get('replicas', 1))} desired, "
                     f"{status.get('replicas', 0)} placed, {status.get('readyReplicas', 0)} "
                     f"ready{bounds}")
    return "\n".join(lines)
