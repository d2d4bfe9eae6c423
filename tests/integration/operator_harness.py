"""Helpers for the operator's tests on the real API server: a fleet, jobs, a live operator.

Each test gets its own namespace and labels its UltraServers `ultraplane.dev/fleet=<namespace>`;
the operator runs with `--fleet <namespace> -n <namespace>`, so tests never see each other's
cluster-scoped UltraServers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.kube_tier import die_with_parent

GROUP, VERSION = "ultraplane.dev", "v1alpha1"


class Harness:
    def __init__(self, kube_env: Any, namespace: str, logdir: Path) -> None:
        from kubernetes import client

        self.env = kube_env
        self.ns = namespace
        self.logdir = logdir
        self.api = client.CustomObjectsApi(kube_env.api_client())
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- the operator process ----------------------------------------------------------
    def start(self, *extra: str) -> None:
        self.starts += 1
        log = open(self.logdir / f"operator-{self.ns}-{self.starts}.log", "wb")  # noqa: SIM115
        argv = [sys.executable, "-m", "ultraplane.cli", "operator", "--standalone",
                "-n", self.ns, "--fleet", self.ns, *extra]
        # Killed with its parent (a killed pytest or benchmark left operators running into the
        # next run). Only when started from the main thread: the kernel sends the signal when
        # the *thread* that started the child ends, and the chaos test restarts from a thread.
        main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(argv, env=self.env.env(), stdout=log, stderr=log,
                                     preexec_fn=die_with_parent if main else None)

    def kill9(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        path = self.logdir / f"operator-{self.ns}-{self.starts}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # -- objects -----------------------------------------------------------------------
    def ultraserver(self, name: str, **spec: Any) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "UltraServer",
                "metadata": {"name": name, "labels": {"ultraplane.dev/fleet": self.ns}},
                "spec": {"profile": "trn3-gen2", "network": ["block-000"], **spec}}
        self.api.create_cluster_custom_object(GROUP, VERSION, "ultraservers", body)

    def patch_ultraserver(self, name: str, spec: dict[str, Any]) -> None:
        self.api.patch_cluster_custom_object(GROUP, VERSION, "ultraservers", name, {"spec": spec})

    def get_ultraserver(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_cluster_custom_object(GROUP, VERSION, "ultraservers", name))

    def delete_fleet(self) -> None:
        self.api.delete_collection_cluster_custom_object(
            GROUP, VERSION, "ultraservers", label_selector=f"ultraplane.dev/fleet={self.ns}")

    def job(self, name: str, chips: int, priority: int = 0, **spec: Any) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {"chips": chips, "priority": priority, "model": {"name": "llama"},
                         "work": {"durationSeconds": 600}, **spec}}
        self.api.create_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", body)

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "trainingjobs", name))

    def jobs(self) -> list[dict[str, Any]]:
        return list(self.api.list_namespaced_custom_object(
            GROUP, VERSION, self.ns, "trainingjobs")["items"])

    def set_status(self, name: str, status: dict[str, Any],
                   resource_version: str | None = None) -> bool:
        """Write status the way the simulator does (status subresource, merge patch). With
        `resource_version` (as last read), only if the job did not change since, as the
        simulator guards its writes: False on a conflict (the operator wrote meanwhile)."""
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self.api.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.ns, "trainingjobs", name, body,
                _content_type="application/merge-patch+json")
        except Exception as exc:
            if resource_version is None or getattr(exc, "status", None) != 409:
                raise
            return False
        return True

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", name)

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
            except Exception as exc:  # not there yet
                last = exc
            if last and not isinstance(last, Exception):
                return last
            time.sleep(0.2)
        tail = self.log_tail() if self.starts else ""
        raise AssertionError(f"timed out waiting for {what}; last={last!r}\n{tail}")

    def phase(self, name: str, phase: str, timeout: float = 30) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            body = self.get(name)
            return body if (body.get("status") or {}).get("phase") == phase else None

        return dict(self.wait(f"{name} to be {phase}", check, timeout))

    def gone(self, name: str, timeout: float = 30) -> None:
        from kubernetes.client import ApiException

        def check() -> bool:
            try:
                self.get(name)
            except ApiException as exc:
                return exc.status == 404
            return False

        self.wait(f"{name} to be deleted", check, timeout)
