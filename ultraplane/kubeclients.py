"""The one way Ultraplane connects to a Kubernetes cluster: config, context, first contact.

Why one module: the operator, the Kubernetes-mode API and the cluster simulator (with its fake
device plugin) each set up the Kubernetes client, and each did it its own way: one honoured a
kubeconfig setting, others only the default file, none a context, and a missing cluster ended
in a long traceback or a retry every minute. Here every cluster command gets the same
`--kubeconfig` and `--context` (`cluster_options`), the same choice of configuration (in a pod
with neither flag: its ServiceAccount; else the kubeconfig, `$KUBECONFIG` or
`~/.kube/config`), and the same first contact (`connect`): a `GET /version` within a few
seconds, so "no cluster" is one sentence (`ClusterUnavailable`) and exit code 2 before the
command starts its loops.

Where it sits: not in the core (it imports the `kubernetes` client, lazily, so `ultraplane
place` never loads it) but in a layer of its own under the three adapters, which import it and
nothing of one another (the import-linter layers contract in pyproject.toml).
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration

PROBE_SECONDS = 5.0
F = TypeVar("F", bound=Callable[..., Any])


class ClusterUnavailable(Exception):
    """No usable cluster: no configuration, a bad one, or an API server that does not answer.
    Its text is one sentence a user can act on."""


@dataclass(frozen=True)
class ClusterAccess:
    """Which cluster: a kubeconfig file and context (None: the defaults)."""

    kubeconfig: str | None = None
    context: str | None = None

    @property
    def in_cluster(self) -> bool:
        """In a pod, with neither flag: the pod's ServiceAccount."""
        return (self.kubeconfig is None and self.context is None
                and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


def _default_kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def configuration(access: ClusterAccess | None = None) -> Configuration:
    """A `kubernetes.client.Configuration` for `access`; `ClusterUnavailable` naming the cause."""
    import yaml
    from kubernetes import client, config

    access = access or ClusterAccess()
    cfg = client.Configuration()
    if access.in_cluster:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return cfg
        except config.ConfigException:
            pass  # KUBERNETES_SERVICE_HOST without a token: try the kubeconfig
    path = access.kubeconfig
    if path is not None and not os.path.isfile(os.path.expanduser(path)):
        raise ClusterUnavailable(f"--kubeconfig {path}: no such file.")
    where = path or _default_kubeconfig()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            # $KUBECONFIG as it is now: the library reads it once, at its import
            config_file=path or os.environ.get("KUBECONFIG") or None, context=access.context,
            client_configuration=cfg, persist_config=False)
    except config.ConfigException as exc:
        text = str(exc)
        if "No configuration found" in text or "file is empty" in text:
            raise ClusterUnavailable(
                f"no Kubernetes cluster configured: not in a pod, and no kubeconfig at {where} "
                "(give --kubeconfig FILE or set KUBECONFIG).") from None
        if access.context is not None and "contexts list" in text:
            raise ClusterUnavailable(
                f"--context {access.context}: no such context in {where}.") from None
        raise ClusterUnavailable(f"the kubeconfig {where} cannot be used: {text}.") from None
    except (OSError, ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterUnavailable(f"the kubeconfig {where} cannot be read: {first}.") from None
    return cfg


def api_client(access: ClusterAccess | None = None, *,
               pool_size: int | None = None) -> ApiClient:
    """A `kubernetes.client.ApiClient` for `access` (not yet contacted: see `connect`)."""
    from kubernetes import client

    cfg = configuration(access)
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def probe(api: ApiClient, *, seconds: float = PROBE_SECONDS) -> None:
    """`GET /version` once, without retries, within `seconds`: `ClusterUnavailable` when the
    API server does not answer or refuses the credentials."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    cfg = copy.deepcopy(api.configuration)
    cfg.retries = 0
    host = cfg.host
    with client.ApiClient(cfg) as once:
        try:
            client.VersionApi(once).get_code(_request_timeout=(seconds, seconds))
        except ApiException as exc:
            if exc.status == 401:
                raise ClusterUnavailable(f"the Kubernetes API server at {host} refused the "
                                         "credentials (401 Unauthorized).") from None
            # any other answer: the server is there (a 403 on /version is a policy choice)
        except Exception as exc:  # urllib3's connection, TLS and timeout errors
            raise ClusterUnavailable(f"cannot reach the Kubernetes API server at {host} "
                                     f"({_reason(exc)}).") from None


def _reason(exc: BaseException) -> str:
    """The innermost cause of a urllib3 error, without the pool's wrapping."""
    inner: BaseException = getattr(exc, "reason", None) or exc
    text = str(inner)
    for marker in ("Connection refused", "timed out", "Name or service not known",
                   "certificate verify failed", "No route to host", "Temporary failure"):
        if marker in text:
            return marker.lower()
    return text.split(": ", 1)[-1].strip().rstrip(")")[:200] or type(inner).__name__


def connect(access: ClusterAccess | None = None, *, pool_size: int | None = None,
            seconds: float = PROBE_SECONDS) -> ApiClient:
    """An `ApiClient` for `access` whose API server answered; `ClusterUnavailable` if none."""
    api = api_client(access, pool_size=pool_size)
    probe(api, seconds=seconds)
    return api


def cluster_options(command: F) -> F:
    """`--kubeconfig FILE` and `--context NAME`, as keyword arguments `kubeconfig` and
    `kube_context`, for every command that talks to a cluster."""
    command = click.option(
        "--context", "kube_context", metavar="NAME", default=None,
        help="Kubeconfig context to use. [default: the current context]")(command)
    return click.option(
        "--kubeconfig", metavar="FILE", default=None,
        help="Kubeconfig file. [default: in a pod, its ServiceAccount; else $KUBECONFIG or "
        "~/.kube/config]")(command)


def exit_unavailable(exc: ClusterUnavailable) -> NoReturn:
    """The CLIs' answer to no cluster: the one sentence on stderr, exit code 2."""
    click.echo(f"Error: {exc}", err=True)
    sys.exit(2)
