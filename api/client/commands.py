"""The client commands: get, describe, apply, delete, top, why, accounting.

Each is a click command written once against a `Transport`; `ultraplane.cli` lists them in
its lazy group, and `plugin` gathers them as `kubectl-ultraplane`. Exit codes: 0 done, 1 what
the server refused or did not find (as kubectl), 2 bad flags or manifests and an unreachable
server or cluster, always as one sentence.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click
from ultraplane.api.client import manifests, sacct
from ultraplane.api.client.connections import connection_options
from ultraplane.api.client.tables import OUTPUTS, document, resource_name, table
from ultraplane.api.client.transports import ClientError, Transport, not_found
from ultraplane.api.client.views import (
    budget_rows,
    describe_job,
    explanation_text,
    job_rows,
    queue_rows,
    scaling_text,
    top_rows,
    ultraserver_rows,
)

__all__ = ["accounting", "apply", "delete", "describe", "get", "plugin", "top", "why"]

# what `get`/`describe`/`delete`/`why` accept as a resource type, kubectl style
JOB_TYPES = {
    "trainingjob": "TrainingJob", "trainingjobs": "TrainingJob", "tj": "TrainingJob",
    "inferencejob": "InferenceJob", "inferencejobs": "InferenceJob", "ij": "InferenceJob",
}
ALL_JOBS = ("jobs", "job")
SERVER_TYPES = ("ultraservers", "ultraserver", "us")
QUEUE_TYPES = ("tenantqueues", "tenantqueue", "tq", "queues", "queue")
BUDGET_TYPES = ("powerbudgets", "powerbudget", "pb", "budgets", "budget")
KINDS = ("TrainingJob", "InferenceJob")
OUTPUT = click.option("-o", "--output", type=click.Choice(OUTPUTS), default="table",
                      show_default=True, help="Output format.")
ALL_NS = click.option("-A", "--all-namespaces", is_flag=True,
                      help="Every namespace (ignores -n).")


def _kinds(args: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """`[TYPE] NAME...` -> (kinds to look in, names); without a known TYPE, both job kinds."""
    if args and args[0].lower() in JOB_TYPES:
        return (JOB_TYPES[args[0].lower()],), list(args[1:])
    if args and args[0].lower() in ALL_JOBS:
        return KINDS, list(args[1:])
    if args and "/" in args[0]:  # trainingjob/NAME, as kubectl prints with -o name
        kind, _, name = args[0].partition("/")
        kind = kind.split(".", 1)[0].lower()
        if kind not in JOB_TYPES:
            raise ClientError(f'the server doesn\'t have a resource type "{kind}"', 2)
        return (JOB_TYPES[kind],), [name, *args[1:]]
    return KINDS, list(args)


def find_job(transport: Transport, kinds: tuple[str, ...], namespace: str,
             name: str) -> dict[str, Any]:
    """The job NAME of the first of `kinds` that has one; NotFound (exit 1) otherwise."""
    for kind in kinds:
        try:
            return transport.get_job(kind, namespace, name)
        except ClientError as exc:
            if "(NotFound)" not in str(exc):
                raise
    if len(kinds) == 1:
        raise not_found(kinds[0], name)
    raise ClientError(f'Error from server (NotFound): no TrainingJob or InferenceJob "{name}" '
                      f'in namespace "{namespace}"', 1)


def _emit(items: list[dict[str, Any]], output: str, *, single: bool,
          rows: Any = None) -> None:
    if output in ("json", "yaml"):
        click.echo(document(items, output, single=single))
    elif output == "name":
        for item in items:
            click.echo(resource_name(item))
    else:
        headers, body = rows
        if not body:
            return
        click.echo(table(headers, body))


@click.command("get")
@click.argument("args", nargs=-1, metavar="[TYPE] [NAME]...")
@OUTPUT
@ALL_NS
@connection_options
def get(args: tuple[str, ...], output: str, all_namespaces: bool, transport: Transport) -> None:
    """List jobs, UltraServers, queues or budgets: TYPE is jobs (default), trainingjobs (tj),
    inferencejobs (ij), ultraservers (us), tenantqueues (tq) or powerbudgets (pb)."""
    if args and args[0].lower() in (*QUEUE_TYPES, *BUDGET_TYPES):
        queues = args[0].lower() in QUEUE_TYPES
        kind, plural = ("TenantQueue", "tenantqueues") if queues else ("PowerBudget",
                                                                       "powerbudgets")
        wanted = set(args[1:])
        found = transport.tenant_queues() if queues else transport.power_budgets()
        found = [o for o in found if not wanted or o["metadata"]["name"] in wanted]
        for missing in sorted(wanted - {o["metadata"]["name"] for o in found}):
            raise ClientError(f'Error from server (NotFound): {plural}.ultraplane.dev '
                              f'"{missing}" not found', 1)
        if not found and not wanted and output in ("table", "wide"):
            click.echo("No resources found.", err=True)
            return
        rows = (queue_rows if queues else budget_rows)(found, wide=output == "wide")
        _emit([{"kind": kind, **o} for o in found], output, single=bool(wanted), rows=rows)
        return
    if args and args[0].lower() in SERVER_TYPES:
        wanted = set(args[1:])
        servers = [s for s in transport.ultraservers() if not wanted or s["name"] in wanted]
        for missing in sorted(wanted - {s["name"] for s in servers}):
            raise ClientError(f'Error from server (NotFound): ultraservers.ultraplane.dev '
                              f'"{missing}" not found', 1)
        items = [{"kind": "UltraServer", "metadata": {"name": s["name"]}, **s} for s in servers]
        _emit(items, output, single=bool(wanted),
              rows=ultraserver_rows(servers, wide=output == "wide"))
        return
    kinds, names = _kinds(args)
    namespace = None if all_namespaces else transport.namespace
    if names:
        items = [find_job(transport, kinds, transport.namespace, n) for n in names]
    else:
        items = [j for k in kinds for j in transport.list_jobs(k, namespace)]
        if not items and output in ("table", "wide"):
            where = "any namespace" if namespace is None else f"{namespace} namespace"
            click.echo(f"No resources found in {where}.", err=True)
            return
    _emit(items, output, single=bool(names),
          rows=job_rows(items, now_s=time.time(), wide=output == "wide",
                        namespaces=all_namespaces, kinds=len(kinds) > 1,
                        replicas=kinds == ("InferenceJob",)))


@click.command("describe")
@click.argument("args", nargs=-1, required=True, metavar="[TYPE] NAME")
@connection_options
def describe(args: tuple[str, ...], transport: Transport) -> None:
    """Show one job in detail: spec, status, allocation and, if it waits, why."""
    kinds, names = _kinds(args)
    if len(names) != 1:
        raise ClientError("describe takes one job name.", 2)
    job = find_job(transport, kinds, transport.namespace, names[0])
    why_text = None
    if (job.get("status") or {}).get("phase", "Pending") in ("Pending", "Preempted"):
        explained = transport.explain(job["kind"], transport.namespace, names[0])
        why_text = explanation_text(explained, now_s=time.time())
    click.echo(describe_job(job, now_s=time.time(), why=why_text))


@click.command("apply")
@click.option("-f", "--filename", "files", multiple=True, required=True, metavar="FILE",
              type=click.Path(dir_okay=False, allow_dash=True),
              help="Manifest file (YAML or JSON, several documents allowed; - for stdin).")
@click.option("-o", "--output", type=click.Choice(["name", "json", "yaml"]), default=None)
@connection_options
def apply(files: tuple[str, ...], output: str | None, transport: Transport) -> None:
    """Create the TrainingJobs and InferenceJobs of manifests; an existing job with the same
    spec is left unchanged."""
    stdin = sys.stdin.read() if "-" in files else None
    wanted = [m for f in files for m in manifests.parse(f, manifests.read(f, stdin))]
    done: list[dict[str, Any]] = []
    for m in wanted:
        namespace = m.namespace or transport.namespace
        try:
            created = transport.create_job(m.kind, namespace, m.body)
            verb = "created"
        except ClientError as exc:
            if "AlreadyExists" not in str(exc) and "already exists" not in str(exc):
                raise ClientError(f"{m.source}: {exc}", exc.code) from None
            created = transport.get_job(m.kind, namespace, m.name)
            if not _subset(m.body["spec"], created.get("spec") or {}):
                raise ClientError(
                    f"{m.source}: {m.kind} {namespace}/{m.name} exists with another spec; a "
                    "job's spec cannot be changed: delete it and apply again.", 1) from None
            verb = "unchanged"
        done.append(created)
        if output is None:
            click.echo(f"{resource_name(created)} {verb}")
    if output is not None:
        _emit(done, output, single=len(done) == 1)


def _subset(want: Any, have: Any) -> bool:
    """Whether every field of `want` is in `have` with the same value (the server may add
    defaults)."""
    if isinstance(want, dict) and isinstance(have, dict):
        return all(k in have and _subset(v, have[k]) for k, v in want.items())
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return float(want) == float(have)
    return bool(want == have)


@click.command("delete")
@click.argument("args", nargs=-1, metavar="[TYPE] [NAME]...")
@click.option("-f", "--filename", "files", multiple=True, metavar="FILE",
              type=click.Path(dir_okay=False, allow_dash=True),
              help="Delete the jobs these manifests name.")
@connection_options
def delete(args: tuple[str, ...], files: tuple[str, ...], transport: Transport) -> None:
    """Delete jobs by name or by manifest; their accounting records stay."""
    targets: list[tuple[tuple[str, ...], str, str]] = []
    stdin = sys.stdin.read() if "-" in files else None
    for f in files:
        targets += [((m.kind,), m.namespace or transport.namespace, m.name)
                    for m in manifests.parse(f, manifests.read(f, stdin))]
    kinds, names = _kinds(args)
    targets += [(kinds, transport.namespace, n) for n in names]
    if not targets:
        raise ClientError("delete needs a job NAME or -f FILE.", 2)
    for kinds_, namespace, name in targets:
        job = find_job(transport, kinds_, namespace, name)
        transport.delete_job(job["kind"], namespace, name)
        click.echo(f'{resource_name(job).split("/", 1)[0]} "{name}" deleted')


@click.command("top")
@click.argument("what", default="ultraservers",
                type=click.Choice(["ultraservers", "us", "jobs"], case_sensitive=False))
@ALL_NS
@connection_options
def top(what: str, all_namespaces: bool, transport: Transport) -> None:
    """Chips, utilization and power now: per UltraServer (default) or per running job."""
    if what.lower() == "jobs":
        namespace = None if all_namespaces else transport.namespace
        jobs = [j for k in KINDS for j in transport.list_jobs(k, namespace)]
        headers, rows = top_rows(jobs, namespaces=all_namespaces)
    else:
        headers, rows = ultraserver_rows(transport.ultraservers(), top=True)
    if rows:
        click.echo(table(headers, rows))
    else:
        click.echo("No running jobs." if what.lower() == "jobs" else "No UltraServers.",
                   err=True)


@click.command("why")
@click.argument("args", nargs=-1, required=True, metavar="[TYPE] NAME")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text",
              show_default=True)
@connection_options
def why(args: tuple[str, ...], output: str, transport: Transport) -> None:
    """Why a job is still pending: its queue position, what blocks it, the nearest
    UltraServers and what holds them, and its predicted start. For an InferenceJob, also
    its last scaling decision and the load and p99s it was read from."""
    kinds, names = _kinds(args)
    if len(names) != 1:
        raise ClientError("why takes one job name.", 2)
    job = find_job(transport, kinds, transport.namespace, names[0])
    explained = transport.explain(job["kind"], transport.namespace, names[0])
    if output == "text":
        click.echo(explanation_text(explained, now_s=time.time()))
        scaling = scaling_text(job)  # an InferenceJob: its last scaling decision and load
        if scaling:
            click.echo(scaling)
    else:
        click.echo(document([explained], "json" if output == "json" else "yaml", single=True))


@click.command("accounting")
@click.option("--name", "job_name", metavar="NAME", help="Only jobs of this name.")
@click.option("--format", "fmt", default=sacct.DEFAULT_FORMAT, show_default=True,
              metavar="FIELDS", help="Comma-separated fields, each optionally %WIDTH: "
              + ", ".join(sacct.FIELDS) + ".")
@click.option("-P", "--parsable", is_flag=True, help="'|'-separated, no padding (sacct -P).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table",
              show_default=True)
@ALL_NS
@connection_options
def accounting(job_name: str | None, fmt: str, parsable: bool, output: str,
               all_namespaces: bool, transport: Transport) -> None:
    """Per job: state, chips, start, end, elapsed, chip-hours and energy, as sacct prints them."""
    sacct.columns(fmt)  # a bad --format fails before the server is asked
    namespace = None if all_namespaces else transport.namespace
    rows = transport.accounting(namespace, job_name)
    if output != "table":
        click.echo(document(rows, output, single=False))
        return
    click.echo(sacct.render(rows, fmt, parsable=parsable))


COMMANDS = (get, describe, apply, delete, top, why, accounting)


@click.group("kubectl-ultraplane", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ultraplane")
def plugin() -> None:
    """Ultraplane's kubectl plugin (`kubectl ultraplane COMMAND`): jobs and UltraServers in
    kubectl's look, why a job waits, and accounting. It talks to the kubeconfig's cluster
    unless --server names the REST API (docs/cli.md)."""


for _command in COMMANDS:
    plugin.add_command(_command)


def main() -> None:
    """The `kubectl-ultraplane` console script."""
    plugin(prog_name="kubectl-ultraplane")
