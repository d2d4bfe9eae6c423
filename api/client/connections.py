"""The connection flags every client command takes, and the choice of transport they make.

Why one decorator: `--server`, the token flags, `--kubeconfig`, `--context` and `-n` mean
the same on every command, and the transport is chosen one way. `--server` (or
`ULTRAPLANE_SERVER`) is the REST API; `--kubeconfig`/`--context` is a cluster. With neither,
`kubectl ultraplane` talks to the kubeconfig's cluster, as kubectl does, and `ultraplane`
to the REST API at http://127.0.0.1:8080, where `ultraplane serve` listens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from ultraplane.api.client.transports import ClientError, RestTransport, Transport

from ultraplane.commands.logs import log_level_option

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_SERVER = "http://127.0.0.1:8080"
PLUGIN = "kubectl-ultraplane"


def connection_options(func: F) -> F:
    """Adds the connection flags; the command receives `transport=...` (built lazily)."""
    options = [
        click.option("--server", envvar="ULTRAPLANE_SERVER", metavar="URL",
                     help="The Ultraplane REST API [env ULTRAPLANE_SERVER]."),
        click.option("--token", envvar="ULTRAPLANE_TOKEN", metavar="TOKEN",
                     help="Bearer token for the REST API [env ULTRAPLANE_TOKEN]."),
        click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
                     help="File whose first line is the bearer token."),
        click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Talk to this kubeconfig's cluster instead of the REST API."),
        click.option("--context", metavar="NAME", help="The kubeconfig context to use."),
        click.option("-n", "--namespace", metavar="NS",
                     help="Namespace [default: the context's, else default]."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        conn = {k: kwargs.pop(k) for k in ("server", "token", "token_file", "kubeconfig",
                                           "context", "namespace")}
        try:
            kwargs["transport"] = connect(click.get_current_context(), **conn)
            return func(*args, **kwargs)
        except ClientError as exc:
            click.echo(f"error: {exc}" if not str(exc).startswith("Error from server")
                       else str(exc), err=True)
            raise SystemExit(exc.code) from None

    # the logging flag every ultraplane command takes (ultraplane/commands/logs.py)
    return log_level_option(default="warning")(wrapper)  # type: ignore[return-value]


def _token(token: str | None, token_file: str | None) -> str | None:
    if token_file is None:
        return token
    try:
        lines = Path(token_file).read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientError(f"--token-file: cannot read {token_file} "
                          f"({getattr(exc, 'strerror', None) or exc}).", 2) from None
    if not lines or not lines[0].strip():
        raise ClientError(f"--token-file: {token_file} is empty.", 2)
    return lines[0].strip()


def connect(ctx: click.Context, *, server: str | None, token: str | None,
            token_file: str | None, kubeconfig: str | None, context: str | None,
            namespace: str | None) -> Transport:
    """The transport the flags ask for (see the module docstring)."""
    if server and (kubeconfig or context) and ctx.get_parameter_source(
            "server") is click.core.ParameterSource.ENVIRONMENT:
        server = None  # a flag on the command line wins over ULTRAPLANE_SERVER
    if server and (kubeconfig or context):
        raise ClientError("--server and --kubeconfig/--context cannot be used together; "
                          "pick the REST API or the cluster.", 2)
    cluster = bool(kubeconfig or context) or (
        not server and ctx.find_root().info_name == PLUGIN)
    if cluster:
        from ultraplane.api.client.clusters import ClusterTransport

        return ClusterTransport(kubeconfig, context, namespace)
    return RestTransport(server or DEFAULT_SERVER, token=_token(token, token_file),
                         namespace=namespace)
