"""Cluster mode on the real API server tier (kube-apiserver + etcd with the CRDs applied).

    UltraServer sim-<id> (trn3-gen2: 36 servers x 4 chips)     namespace <kube_namespace>
      s00: c00 c01 c02 c03   <- TrainingJob (4 chips)

`ultraplane simulator --time-scale 1000` runs as a subprocess with `kube_env.env()`; the
joint tests also run `ultraplane operator --standalone`, so admission is the operator's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.kube

SERVER0 = [f"s00/c{c:02d}" for c in range(4)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(kube_env: Any, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ultraplane.cli", *args], env=kube_env.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")[-3000:]


def _get(kube_env: Any, kind: str, name: str, ns: str | None = None) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"] + (["-n", ns] if ns else [])
    return json.loads(kube_env.kubectl(*args).stdout)  # type: ignore[no-any-return]


def _wait(what: str, check: Callable[[], Any], procs: list[subprocess.Popen[bytes]],
          timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"a subprocess exited early: {_stop(p)}"
        last = check()
        if last:
            return last
        time.sleep(0.5)
    logs = "\n".join(_stop(p) for p in procs)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}\n{logs}")


@pytest.fixture
def ultraserver(kube_env: Any) -> Iterator[str]:
    name = f"sim-{uuid.uuid4().hex[:8]}"
    # labelled as a fleet of its own: the session's API server holds other tests' UltraServers,
    # and the operator here (`--fleet`) must place only on this one
    doc = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "UltraServer",
           "metadata": {"name": name, "labels": {"ultraplane.dev/fleet": name}},
           "spec": {"profile": "trn3-gen2", "network": ["block-sim"]}}
    kube_env.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    yield name
    kube_env.kubectl("delete", "ultraserver", name, "--wait=false", check=False)


def _job(name: str, *, seconds: int, policy: str = "RestartAll") -> str:
    return yaml.safe_dump({
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"chips": 4, "topology": {"requiredLevel": "server"}, "precision": "BF16",
                 "model": {"name": "llama-3-8b", "parametersBillions": 8},
                 "work": {"durationSeconds": seconds}, "checkpointIntervalSeconds": 600,
                 "failurePolicy": policy},
    })


def test_simulator_runs_an_admitted_job_and_writes_status(kube_env: Any, kube_namespace: str,
                                                           ultraserver: str) -> None:
    """Admission done by hand (status subresource), so this tier needs no operator."""
    ns = kube_namespace
    kube_env.kubectl("apply", "-n", ns, "-f", "-", input=_job("hand", seconds=3000))
    chips = [f"{ultraserver}/{c}" for c in SERVER0]
    status = {"phase": "Admitted", "attempt": 1, "queuePosition": 0,
              "allocation": {"ultraServers": [ultraserver], "servers": [f"{ultraserver}/s00"],
                             "chips": chips, "level": "server"}}
    kube_env.kubectl("patch", "-n", ns, "trainingjob", "hand", "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": status}))
    port = _free_port()
    sim = _start(kube_env, "simulator", "--time-scale", "1000", "--heartbeat-s", "0.5",
                 "--metrics-port", str(port), "--namespace", ns)
    try:
        running = _wait("Running", lambda: (s := _get(kube_env, "tj", "hand", ns)["status"])
                        .get("phase") == "Running" and s, [sim])
        assert running["startTime"] and running["powerWatts"] > 4 * 300
        done = _wait("Succeeded", lambda: (s := _get(kube_env, "tj", "hand", ns)["status"])
                     .get("phase") == "Succeeded" and s, [sim])
        assert done["energyKWh"] > 0 and done["progress"]["percent"] == 100 and done["completionTime"]
        # operator-owned fields are untouched
        assert done["allocation"]["chips"] == chips and done["attempt"] == 1 and done["queuePosition"] == 0
        conditions = {c["type"]: c["status"] for c in done["conditions"]}
        assert conditions == {"Running": "False", "Finished": "True"}
        us = _wait("UltraServer heartbeat", lambda: _get(kube_env, "us", ultraserver)
                   .get("status", {}).get("heartbeatTime") and _get(kube_env, "us", ultraserver)["status"],
                   [sim])
        assert len(us["chips"]) == 144 and us["powerWatts"] >= 144 * 300 and us["energyKWh"] > 0
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "ultraplane_sim_fleet_power_watts" in metrics
        assert 'ultraplane_sim_job_events_total{kind="Succeeded"} 1.0' in metrics
    finally:
        _stop(sim)


@pytest.fixture
def operator_and_simulator(kube_env: Any, kube_namespace: str,
                           ultraserver: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [_start(kube_env, "operator", "--standalone", "-n", kube_namespace, "--fleet", ultraserver),
             _start(kube_env, "simulator", "--time-scale", "1000", "--heartbeat-s", "0.5",
                    "--metrics-port", "0", "--namespace", kube_namespace)]
    yield procs
    for p in procs:
        _stop(p)


def test_with_operator_job_runs_and_succeeds_with_energy(
        kube_env: Any, kube_namespace: str, ultraserver: str,
        operator_and_simulator: list[subprocess.Popen[bytes]]) -> None:
    ns = kube_namespace
    kube_env.kubectl("apply", "-n", ns, "-f", "-", input=_job("quick", seconds=2000))
    done = _wait("Succeeded", lambda: (s := _get(kube_env, "tj", "quick", ns).get("status", {}))
                 .get("phase") == "Succeeded" and s, operator_and_simulator, timeout=120)
    assert done["energyKWh"] > 0 and done["progress"]["percent"] == 100


@pytest.mark.parametrize("policy", ["RestartAll", "Fail"])
def test_with_operator_chip_failure_applies_the_policy(
        kube_env: Any, kube_namespace: str, ultraserver: str, policy: str,
        operator_and_simulator: list[subprocess.Popen[bytes]]) -> None:
    ns = kube_namespace
    kube_env.kubectl("apply", "-n", ns, "-f", "-", input=_job("long", seconds=10_000_000, policy=policy))
    running = _wait("Running", lambda: (s := _get(kube_env, "tj", "long", ns).get("status", {}))
                    .get("phase") == "Running" and s, operator_and_simulator, timeout=120)
    victim = running["allocation"]["chips"][0]
    owner, local = victim.split("/", 1)
    assert owner == ultraserver, f"placed outside the test's fleet: {victim}"
    kube_env.kubectl("patch", "us", ultraserver, "--type=merge",
                     "-p", json.dumps({"spec": {"failedChips": [local]}}))
    if policy == "Fail":
        _wait("Failed", lambda: _get(kube_env, "tj", "long", ns)["status"].get("phase") == "Failed",
              operator_and_simulator, timeout=120)
        return

    def restarted() -> Any:
        s = _get(kube_env, "tj", "long", ns)["status"]
        ok = (s.get("attempt", 0) > running.get("attempt", 1) and s.get("phase") == "Running"
              and victim not in s["allocation"]["chips"])
        return ok and s

    after = _wait("restart on healthy chips", restarted, operator_and_simulator, timeout=120)
    assert after["energyKWh"] >= running["energyKWh"]
