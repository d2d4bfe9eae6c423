"""`ultraplane serve`: the REST API, by default with an embedded demo fleet.

This is the README's first command: no cluster, eight Gen2 UltraServers run by
the simulator at 60x, a stream of demo jobs, state in a SQLite file that
survives a restart. Bad flags exit with code 2 and one sentence naming the flag.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ultraplane.commands.logs import level_name, log_level_option
from ultraplane.commands.paramtypes import FINITE_FLOAT
from ultraplane.kubeclients import cluster_options

FLAG_OF_FIELD = {
    "backend": "--backend", "db": "--db", "fleet": "--fleet", "cluster": "--cluster",
    "time_scale": "--time-scale", "token_file": "--token-file", "tick_seconds": "--tick-seconds",
    "kubeconfig": "--kubeconfig", "kube_context": "--context", "queues": "--queues",
    "power_budgets": "--power-budgets", "inference_trace": "--inference-trace",
    "inference_rate_scale": "--rate-scale", "autoscale_seconds": "--autoscale-seconds",
}


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@click.command("serve")
@click.option("--backend", type=click.Choice(["embedded", "kubernetes"]), default=None,
              help="embedded (default): fleet and simulator in-process; kubernetes: the cluster's custom resources.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--fleet", default=None, help="Embedded fleet as PROFILE:COUNT [default: trn3-gen2:8].")
@click.option("--cluster", type=click.Path(dir_okay=False), default=None,
              help="Embedded fleet from a cluster YAML instead of --fleet.")
@click.option("--db", default=None, help="Store URL: sqlite:///FILE or postgresql://... "
              "[default: ~/.local/share/ultraplane/ultraplane.db].")
@click.option("--demo/--no-demo", default=True, show_default=True, help="Submit a stream of demo jobs.")
@click.option("--time-scale", type=FINITE_FLOAT, default=None, help="Simulated seconds per wall second [default: 60].")
@click.option("--tick-seconds", type=FINITE_FLOAT, default=None, help="Wall seconds between scheduling ticks [default: 1].")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="File of bearer tokens, one per line; mutating calls then need one.")
@click.option("--queues", type=click.Path(dir_okay=False), default=None,
              help="Embedded fleet: tenant queues from a YAML list (docs/queues.md).")
@click.option("--power-budgets", type=click.Path(dir_okay=False), default=None,
              help="Embedded fleet: power budgets from a YAML list (docs/power.md).")
@click.option("--inference-trace", type=click.Path(dir_okay=False), default=None,
              help="Embedded fleet: request trace (Azure CSV) offered to each autoscaled "
              "InferenceJob [default: a built-in day shape].")
@click.option("--rate-scale", "inference_rate_scale", type=FINITE_FLOAT, default=None,
              help="Embedded fleet: multiple of the request trace's rate [default: 1].")
@click.option("--autoscale-seconds", type=FINITE_FLOAT, default=None,
              help="Embedded fleet: simulated seconds between planner steps [default: 30].")
@cluster_options
@log_level_option(default="warning")
def serve(**opts: Any) -> None:
    """Serve the REST API (embedded fleet by default); prints the URL and the docs URL."""
    from pydantic import ValidationError
    from ultraplane.api.settings import Settings

    if opts["fleet"] and opts["cluster"]:
        _fail("--fleet and --cluster cannot be used together; pick one.")
    overrides = {
        key: opts[key]
        for key in ("backend", "db", "fleet", "cluster", "time_scale", "token_file", "tick_seconds",
                    "kubeconfig", "kube_context", "queues", "power_budgets", "inference_trace",
                    "inference_rate_scale", "autoscale_seconds")
        if opts[key] is not None
    }
    overrides["demo"] = opts["demo"] and (opts["backend"] or "embedded") == "embedded"
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "settings"
        message = str(err["msg"]).removeprefix("Value error, ").rstrip(".")
        _fail(f"{FLAG_OF_FIELD.get(field, field)}: {message}.")
    _check_port(opts["host"], opts["port"])
    _check_cluster(settings)
    app = _build(settings)
    import uvicorn

    shown_host = "127.0.0.1" if opts["host"] in ("0.0.0.0", "::") else opts["host"]
    from ultraplane.api.guards.connections import server_options

    config = uvicorn.Config(app, host=opts["host"], port=opts["port"], log_level=level_name(),
                            access_log=False, lifespan="on",
                            **server_options(read_seconds=settings.request_read_seconds,
                                             max_connections=settings.max_connections))
    _print_banner(settings, shown_host, opts["port"])
    uvicorn.Server(config).run()


def _check_port(host: str, port: int) -> None:
    """Fail early, naming the flag, rather than after startup with a bind traceback."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            _fail(f"--port: cannot listen on {host}:{port} ({exc.strerror}).")


def _check_cluster(settings: Any) -> None:
    """Kubernetes mode with no cluster: one sentence and exit 2 (`ultraplane/kubeclients.py`)."""
    if settings.backend != "kubernetes":
        return
    from ultraplane.kubeclients import ClusterAccess, ClusterUnavailable, connect, exit_unavailable

    try:
        connect(ClusterAccess(settings.kubeconfig, settings.kube_context))
    except ClusterUnavailable as exc:
        exit_unavailable(exc)


def _build(settings: Any) -> Any:
    """create_app with startup problems (bad DB URL, unreadable files) as one-sentence errors."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError
    from ultraplane.api.app import create_app
    from ultraplane.api.store.claims import StoreError, masked, reason

    try:
        return create_app(settings)
    except StoreError as exc:  # corrupt, read-only, full, in use: already one sentence
        _fail(f"--db: {exc}")
    except ArgumentError as exc:
        _fail(f"--db: {masked(settings.db)} is not a database URL ({exc}).")
    except SQLAlchemyError as exc:
        _fail(f"--db: cannot open the store at {masked(settings.db)}: {reason(exc)}.")
    except (ValueError, OSError) as exc:
        from ultraplane.hardware.profiles import UnknownProfileError

        if isinstance(exc, UnknownProfileError):
            flag = "--fleet"
        elif settings.cluster and "token" not in str(exc):
            flag = "--cluster"
        elif "token" in str(exc):
            flag = "--token-file"
        else:
            flag = "--fleet"
        _fail(f"{flag}: {exc}")
    return None


def _print_banner(settings: Any, host: str, port: int) -> None:
    url = f"http://{host}:{port}"
    fleet = settings.cluster or settings.fleet
    where = (f"fleet {fleet}, simulated time at {settings.time_scale:g}x: job times are simulated"
             if settings.backend == "embedded" else "cluster")
    click.echo(f"Ultraplane API ({settings.backend} backend, {where}) on {url}")
    click.echo(f"  ui:    {url}/ (live dashboard)")
    click.echo(f"  docs:  {url}/docs")
    from ultraplane.api.store.claims import masked

    click.echo(f"  store: {masked(settings.db)}")
    sys.stdout.flush()
