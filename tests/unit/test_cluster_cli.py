"""Every cluster command with no cluster: one sentence on stderr, exit code 2, in seconds.

Each case runs the real `ultraplane` command in its own process, as a user would, with a
kubeconfig that points at a port nobody listens on (or a missing file, or a missing context),
and with no other kubeconfig or in-cluster environment to fall back on.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ultraplane.kubeclients import ClusterAccess, ClusterUnavailable, connect

BOUND_SECONDS = 30.0  # the probe's own limit is 5 s; the rest is Python starting up


def closed_port() -> int:
    """A local port that refuses connections (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
contexts:
- name: nowhere
  context: {{cluster: nowhere, user: someone}}
current-context: nowhere
users:
- name: someone
  user: {{token: not-a-real-token}}
""")
    return path


def run(tmp_path: Path, *args: str) -> tuple[int, list[str], float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
           and not k.startswith("ULTRAPLANE_")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config to fall back on
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ultraplane.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, lines, time.monotonic() - started


def commands(tmp_path: Path) -> dict[str, list[str]]:
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir(exist_ok=True)
    return {
        "operator": ["operator", "--standalone"],
        "simulator": ["simulator", "--metrics-port", "0"],
        "device-plugin": ["simulator", "device-plugin", "--node-name", "n1",
                          "--plugin-dir", str(plugin_dir)],
        "serve": ["serve", "--backend", "kubernetes", "--port", "0",
                  "--db", f"sqlite:///{tmp_path / 'api.db'}"],
    }


@pytest.mark.parametrize("command", ["operator", "simulator", "device-plugin", "serve"])
def test_a_closed_port_is_one_sentence_and_exit_2(tmp_path: Path, command: str) -> None:
    port = closed_port()
    config = kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    args = commands(tmp_path)[command]
    if command == "simulator":  # group options come before a subcommand
        args = [args[0], "--kubeconfig", str(config), *args[1:]]
    else:
        args = [*args, "--kubeconfig", str(config)]
    code, stderr, seconds = run(tmp_path, *args)
    assert code == 2, stderr
    assert stderr == [f"Error: cannot reach the Kubernetes API server at "
                      f"https://127.0.0.1:{port} (connection refused)."]
    assert seconds < BOUND_SECONDS


@pytest.mark.parametrize("command", ["operator", "serve"])
def test_no_kubeconfig_at_all_says_how_to_give_one(tmp_path: Path, command: str) -> None:
    code, stderr, _ = run(tmp_path, *commands(tmp_path)[command])
    assert code == 2, stderr
    assert len(stderr) == 1
    assert stderr[0].startswith("Error: no Kubernetes cluster configured: not in a pod")
    assert "--kubeconfig" in stderr[0]


def test_a_missing_context_and_a_missing_file_are_named(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, "https://127.0.0.1:1")
    code, stderr, _ = run(tmp_path, "operator", "--kubeconfig", str(config), "--context", "prod")
    assert (code, stderr) == (2, [f"Error: --context prod: no such context in {config}."])
    code, stderr, _ = run(tmp_path, "simulator", "--kubeconfig", str(tmp_path / "nope"))
    assert (code, stderr) == (2, [f"Error: --kubeconfig {tmp_path / 'nope'}: no such file."])


def test_the_context_flag_picks_the_cluster(tmp_path: Path) -> None:
    """Two contexts, both unreachable: the error names the server --context picked."""
    port = closed_port()
    path = tmp_path / "two"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- {{name: a, cluster: {{server: "https://127.0.0.1:1"}}}}
- {{name: b, cluster: {{server: "https://127.0.0.1:{port}"}}}}
contexts:
- {{name: a, context: {{cluster: a, user: u}}}}
- {{name: b, context: {{cluster: b, user: u}}}}
current-context: a
users:
- {{name: u, user: {{token: t}}}}
""")
    with pytest.raises(ClusterUnavailable, match=re.escape(f"127.0.0.1:{port} ")):
        connect(ClusterAccess(str(path), "b"))
    with pytest.raises(ClusterUnavailable, match=re.escape("127.0.0.1:1 ")):
        connect(ClusterAccess(str(path)))


def test_flags_win_over_a_pods_service_account(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pod, --kubeconfig/--context still choose the cluster; without them the pod's own
    ServiceAccount is tried first and a pod without one falls back to the kubeconfig."""
    from ultraplane.kubeclients import configuration

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = kubeconfig(tmp_path, "https://127.0.0.1:7")
    assert ClusterAccess(str(config)).in_cluster is False
    assert configuration(ClusterAccess(str(config))).host == "https://127.0.0.1:7"
    assert ClusterAccess().in_cluster is True
    monkeypatch.setenv("KUBECONFIG", str(config))  # no token file here: the kubeconfig is next
    assert configuration(ClusterAccess()).host == "https://127.0.0.1:7"


def test_kopf_logs_in_to_the_context_the_flags_chose(tmp_path: Path) -> None:
    """kopf's watches use the same set-up as the operator's own client (operator/kube.py)."""
    from ultraplane.operator.kube import connection_info

    path = tmp_path / "two"
    path.write_text("""apiVersion: v1
kind: Config
clusters:
- {name: a, cluster: {server: "https://a.example:6443"}}
- {name: b, cluster: {server: "https://b.example:6443", insecure-skip-tls-verify: true}}
contexts:
- {name: a, context: {cluster: a, user: ua}}
- {name: b, context: {cluster: b, user: ub}}
current-context: a
users:
- {name: ua, user: {token: token-a}}
- {name: ub, user: {token: token-b}}
""")
    chosen = connection_info(ClusterAccess(str(path), "b"))
    assert (chosen.server, chosen.scheme, chosen.token, chosen.insecure) == (
        "https://b.example:6443", "Bearer", "token-b", True)
    current = connection_info(ClusterAccess(str(path)))
    assert (current.server, current.token) == ("https://a.example:6443", "token-a")
