"""What the kind tests use to drive a cluster the way a user does: kubectl, helm, waits."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
NEURON_RESOURCE = "aws.amazon.com/neuron"


class CommandFailed(AssertionError):
    pass


@dataclass(frozen=True)
class Kind:
    context: str
    kubectl: str
    helm: str
    root: Path

    def run(self, *args: str, stdin: str | None = None, timeout: float = 180,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(args), input=stdin, capture_output=True, text=True,
                                timeout=timeout, cwd=self.root, check=False)
        if check and result.returncode != 0:
            raise CommandFailed(f"{' '.join(args[:6])} ... exited {result.returncode}:\n"
                                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def kc(self, *args: str, stdin: str | None = None, timeout: float = 180,
           check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(self.kubectl, "--context", self.context, *args, stdin=stdin,
                        timeout=timeout, check=check)

    def kc_as(self, token: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl as the bearer of `token` alone: a kubeconfig with the cluster's address and CA
        and no client certificate (which would authenticate as the cluster admin)."""
        config = json.loads(self.kubectl_out("config", "view", "--raw", "--minify", "-o", "json"))
        cluster = config["clusters"][0]["cluster"]
        path = Path(tempfile.mkdtemp(prefix="ultraplane-e2e-")) / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "token",
            "clusters": [{"name": "kind", "cluster": cluster}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": {"cluster": "kind", "user": "token"}}]}))
        try:
            return self.run(self.kubectl, "--kubeconfig", str(path), *args, check=check)
        finally:
            path.unlink()
            path.parent.rmdir()

    def kubectl_out(self, *args: str, stdin: str | None = None, timeout: float = 180) -> str:
        return self.kc(*args, stdin=stdin, timeout=timeout).stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl_out("get", *args, "-o", "json"))

    def items(self, *args: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(*args)["items"]
        return items

    def apply(self, manifest: str, *args: str) -> None:
        self.kc("apply", *args, "-f", "-", stdin=manifest)

    def helm_run(self, *args: str, timeout: float = 600) -> str:
        return self.run(self.helm, "--kube-context", self.context, *args, timeout=timeout).stdout

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
        """`kubectl port-forward` to a free local port; yields the base URL once it answers."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            local = s.getsockname()[1]
        process = subprocess.Popen(
            [self.kubectl, "--context", self.context, "-n", namespace, "port-forward", target,
             f"{local}:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def listening() -> bool:
                if process.poll() is not None:
                    raise CommandFailed(f"port-forward exited: {process.stderr.read() if process.stderr else ''}")
                with socket.socket() as probe:
                    return probe.connect_ex(("127.0.0.1", local)) == 0
            wait_until(f"port-forward to {target}", listening, timeout=60)
            yield f"http://127.0.0.1:{local}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def workers_as_servers(kind: Kind, ultraserver: str, *labels: str) -> dict[int, str]:
    """The first two workers labelled (and uncordoned) as servers 0 and 1 of `ultraserver`,
    the way EKS labels Trn3 nodes, plus `labels`; server index -> Node. Every job and every
    hand-written UltraServer is deleted first, so the Node-built UltraServer is the only place
    a job can go."""
    kind.kc("delete", "trainingjobs,inferencejobs", "--all", "-A", "--wait", timeout=300)
    kind.kc("delete", "ultraservers", "-l", "ultraplane.dev/managed-by!=nodes", "--wait", timeout=300)
    names = sorted(n["metadata"]["name"] for n in kind.items("nodes")
                   if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {}))
    assert len(names) >= 2, names
    nodes = dict(enumerate(names[:2]))
    for index, node in nodes.items():
        kind.kc("label", "node", node, "--overwrite", f"ultraplane.dev/ultraserver={ultraserver}",
                f"ultraplane.dev/server-index={index}", "ultraplane.dev/profile=trn3-gen2", *labels)
        kind.kc("uncordon", node)
    return nodes


def neuron_workers(kind: Kind, ultraserver: str, *values: str) -> dict[int, str]:
    """`workers_as_servers`, then the chart upgraded with the fake Neuron device plugin and
    UltraServers from Nodes (and `values`, more `--set`s): server index -> Node, once each
    Node has 4 chips allocatable and the UltraServer has both servers in service."""
    from tests.e2e.conftest import NAMESPACE, RELEASE

    nodes = workers_as_servers(kind, ultraserver)
    sets = [a for v in ("devicePlugin.enabled=true", "operator.ultraserversFromNodes=true", *values)
            for a in ("--set", v)]
    kind.helm_run("upgrade", RELEASE, "helm/ultraplane", "--namespace", NAMESPACE, "--reuse-values",
                  *sets, "--wait", "--timeout", "10m", timeout=900)
    for node in nodes.values():
        wait_until(f"{NEURON_RESOURCE} allocatable on {node}", lambda node=node: kind.get("node", node)
                   ["status"].get("allocatable", {}).get(NEURON_RESOURCE) == "4", timeout=180)

    def in_service() -> bool:  # the operator may not have written the UltraServer yet
        got = kind.kc("get", "ultraserver", ultraserver, "-o", "json", check=False)
        return got.returncode == 0 and not {0, 1} & set(
            json.loads(got.stdout)["spec"].get("cordonedServers", []))
    wait_until(f"UltraServer {ultraserver} with both servers in service", in_service, timeout=180)
    return nodes


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 300,
               interval: float = 1.0, last: Callable[[], str] | None = None) -> T:
    """Polls `probe` until it returns something truthy and returns that; fails after `timeout`
    seconds naming `what` (and `last()`, the state seen, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; last seen: {last()}" if last is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(interval)


def condition(body: dict[str, Any], kind: str) -> str | None:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def held_chips(jobs: list[dict[str, Any]]) -> dict[str, str]:
    """chip id -> the job holding it, from the statuses of jobs that still hold chips; fails
    when two jobs hold one chip."""
    holders: dict[str, str] = {}
    for job in jobs:
        status = job.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        name = f"{job['kind']}/{job['metadata']['namespace']}/{job['metadata']['name']}"
        for chip in (status.get("allocation") or {}).get("chips") or []:
            other = holders.setdefault(chip, name)
            assert other == name, f"chip {chip} is held by {other} and by {name}"
    return holders
