"""The chart's RBAC and command lines, proven by the real components on the real API server.

The API server tier has no nodes, so the chart's pods never run there. Instead this test
installs the chart, then starts the operator (twice, as the two replicas), the simulator and the
REST API as local processes with exactly the arguments and environment of the rendered
Deployments, each authenticated as the chart's own ServiceAccount. The kind e2e steps
(hack/kind-e2e.sh apply, lifecycle, rest, cleanup) then run against them: a job admitted,
running, succeeded with energy; a job created and deleted through the REST API; every chip free
again. A missing RBAC verb or a flag the CLI no longer accepts fails here, not first on kind.
The last part kills the Lease holder and checks the standby replica takes over.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "ultraplane"
SCRIPT = ROOT / "hack" / "kind-e2e.sh"
TIME_SCALE = 20000  # the 8B fine-tune example (~29 simulated hours) takes a few seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def helm_binary() -> str:
    result = subprocess.run([str(ROOT / "hack" / "helm.sh")], capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@dataclass
class Release:
    namespace: str
    api_url: str
    admin_env: dict[str, str]
    context: str
    operators: list[subprocess.Popen[bytes]] = field(default_factory=list)
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: Path = field(default_factory=Path)

    def kubectl(self, *args: str) -> str:
        result = subprocess.run(["kubectl", "--context", self.context, *args], capture_output=True,
                                text=True, timeout=120, env=self.admin_env)
        assert result.returncode == 0, result.stderr
        return result.stdout


def service_account_kubeconfig(kube_env: Any, namespace: str, sa: str, path: Path) -> Path:
    token = kube_env.kubectl("create", "token", sa, "-n", namespace, "--duration=2h").stdout.strip()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": sa,
        "clusters": [{"name": "tier", "cluster": {"server": kube_env.server,
                                                  "certificate-authority": str(kube_env.ca_file)}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "tier", "user": sa}}],
    }))
    return path


def local_command(container: dict[str, Any], ports: dict[str, int]) -> list[str]:
    """The container's args, with its listen addresses moved to free loopback ports."""
    args = list(container["args"])
    for i, arg in enumerate(args):
        if arg == "--liveness":
            args[i + 1] = f"http://127.0.0.1:{ports['health']}/healthz"
        elif arg == "--host":
            args[i + 1] = "127.0.0.1"
        elif arg == "--port":
            args[i + 1] = str(ports["http"])
        elif arg == "--metrics-port":
            args[i + 1] = str(ports["metrics"])
    return [str(Path(sys.executable).parent / "ultraplane"), *args]


def local_env(container: dict[str, Any], namespace: str, kubeconfig: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ULTRAPLANE_")}
    env.update(KUBECONFIG=str(kubeconfig), HOME=str(tmp), TMPDIR=str(tmp),
               PYTHONDONTWRITEBYTECODE="1", MPLCONFIGDIR=str(tmp / "mpl"))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"].replace("sqlite:////tmp/", f"sqlite:///{tmp}/")
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[item["name"]] = namespace
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[item["name"]] = f"{container['name']}-{uuid.uuid4().hex[:5]}"
    return env


@pytest.fixture
def release(kube_env: Any, kube_namespace: str, tmp_path: Path) -> Iterator[Release]:
    ns, name = kube_namespace, "live"
    env = {**kube_env.env(), "HELM_CACHE_HOME": str(tmp_path / "hc"),
           "HELM_CONFIG_HOME": str(tmp_path / "hcfg"), "HELM_DATA_HOME": str(tmp_path / "hd")}
    helm = helm_binary()
    values = ["--set", f"operator.watchNamespaces[0]={ns}", "--set", f"simulator.namespace={ns}",
              "--set", f"simulator.timeScale={TIME_SCALE}", "--set", "operator.leaderElection.name=live"]
    out = subprocess.run([helm, "install", name, str(CHART), "-n", ns, "--force-conflicts", *values],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    manifest = subprocess.run([helm, "get", "manifest", name, "-n", ns], capture_output=True,
                              text=True, env=env, timeout=60).stdout
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment"}
    context = yaml.safe_load(Path(kube_env.kubeconfig).read_text())["current-context"]
    ports = {"health": 0, "http": free_port(), "metrics": free_port()}
    live = Release(namespace=ns, api_url=f"http://127.0.0.1:{ports['http']}", admin_env=env,
                   context=context, logs=tmp_path)
    try:
        for component, deployment in deployments.items():
            pod = deployment["spec"]["template"]["spec"]
            container = pod["containers"][0]
            kubeconfig = service_account_kubeconfig(
                kube_env, ns, pod["serviceAccountName"], tmp_path / f"kc-{component}")
            for replica in range(deployment["spec"]["replicas"]):
                ports["health"] = free_port()
                home = tmp_path / f"{component}-{replica}"
                home.mkdir()
                proc = subprocess.Popen(
                    local_command(container, ports), cwd=home,
                    env=local_env(container, ns, kubeconfig, home),
                    stdout=(home / "log").open("wb"), stderr=subprocess.STDOUT)
                (live.operators if component == "operator" else live.others).append(proc)
        yield live
    finally:
        for proc in live.operators + live.others:
            proc.terminate()
        for proc in live.operators + live.others:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run([helm, "uninstall", name, "-n", ns], capture_output=True, env=env, timeout=120)


def run_steps(live: Release, *steps: str, examples: Path) -> None:
    env = {**live.admin_env, "KUBE_CONTEXT": live.context, "API_URL": live.api_url,
           "JOB_NAMESPACE": live.namespace, "EXAMPLES": str(examples), "WAIT_SECONDS": "120",
           "STATE_DIR": str(live.logs / "state")}
    result = subprocess.run(["bash", str(SCRIPT), *steps], capture_output=True, text=True,
                            env=env, timeout=900)
    if result.returncode != 0:
        logs = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(live.logs.glob("*/log")))
        pytest.fail(f"kind-e2e.sh {' '.join(steps)}:\n{result.stderr[-6000:]}\n{logs}")


def test_chart_components_run_a_job_end_to_end_under_their_own_rbac(
    release: Release, tmp_path: Path
) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    # The fleet and the short fine-tune: the jobs that finish at TIME_SCALE.
    for name in ("fleet-gen2.yaml", "trainingjob-small.yaml"):
        shutil.copy(ROOT / "examples" / name, examples / name)
    run_steps(release, "apply", "lifecycle", "rest", "cleanup", examples=examples)


def test_standby_operator_takes_over_when_the_lease_holder_dies(release: Release) -> None:
    assert len(release.operators) == 2
    holder = ""
    for _ in range(60):
        holder = release.kubectl("get", "lease", "live", "-n", release.namespace, "-o",
                                 "jsonpath={.spec.holderIdentity}") if _lease_exists(release) else ""
        if holder:
            break
        time.sleep(1)
    assert holder, "no operator replica took the Lease"
    leader = next(p for p in release.operators if holder.endswith(f"-{p.pid}"))
    leader.kill()
    leader.wait(timeout=20)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = release.kubectl("get", "lease", "live", "-n", release.namespace, "-o",
                              "jsonpath={.spec.holderIdentity}")
        if now and now != holder:
            break
        time.sleep(1)
    else:
        pytest.fail(f"the standby never took the Lease from {holder}")
    job = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "after-failover", "namespace": release.namespace},
           "spec": {"chips": 4, "work": {"durationSeconds": 864000}}}
    release.kubectl("apply", "-f", _write(release.logs / "job.json", json.dumps(job)))
    release.kubectl("apply", "-f", str(ROOT / "examples" / "fleet-gen2.yaml"))
    release.kubectl("wait", "trainingjob/after-failover", "-n", release.namespace,
                    "--for=condition=Admitted", "--timeout=120s")
    release.kubectl("delete", "trainingjob/after-failover", "-n", release.namespace,
                    "--timeout=120s")


def _lease_exists(release: Release) -> bool:
    out = subprocess.run(["kubectl", "--context", release.context, "get", "lease", "live", "-n",
                          release.namespace], capture_output=True, env=release.admin_env)
    return out.returncode == 0


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)
