"""Playing kubelet on the real API server tier, which has no kubelet: Nodes and pod status.

Why needed: pods bound to a Node (`nodeName`) are deleted gracefully, and only a kubelet
finishes the deletion (a delete with grace 0 once the containers stopped). So `PlayedKubelet`
does that for the pods of one namespace, except for the pods a test holds back (to show that
a preemptor waits for its victim's pods), and sets pod phases as a kubelet would report them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

SERVER_INDEX = "ultraplane.dev/server-index"
ULTRASERVER = "ultraplane.dev/ultraserver"
TEST_NODE = "ultraplane.dev/test-node"


def node_name(us: str, index: int) -> str:
    return f"{us}-n{index:02d}"


def make_nodes(core: Any, us: str, indexes: Iterable[int]) -> list[str]:
    """Ready Nodes labelled as servers `indexes` of UltraServer `us`."""
    from kubernetes.client import ApiException

    names = []
    for i in indexes:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node_name(us, i),
                             "labels": {ULTRASERVER: us, SERVER_INDEX: str(i), TEST_NODE: us}}}
        try:
            core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(node_name(us, i))
    return names


def delete_nodes(core: Any, us: str) -> None:
    core.delete_collection_node(label_selector=f"{TEST_NODE}={us}")


class PlayedKubelet:
    """Finishes graceful pod deletions in one namespace (a background thread) and sets phases."""

    def __init__(self, core: Any, namespace: str, interval: float = 0.2) -> None:
        self.core = core
        self.ns = namespace
        self.interval = interval
        self.hold: set[str] = set()  # pod name prefixes whose deletion is not finished yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PlayedKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            # the next pass retries; a test failure shows the state
            with contextlib.suppress(Exception):
                self.finish_deletions()

    def finish_deletions(self) -> None:
        from kubernetes.client import ApiException, V1DeleteOptions

        for pod in self.core.list_namespaced_pod(self.ns).items:
            name = pod.metadata.name
            if pod.metadata.deletion_timestamp is None or any(name.startswith(h)
                                                               for h in self.hold):
                continue
            try:
                self.core.delete_namespaced_pod(name, self.ns,
                                                body=V1DeleteOptions(grace_period_seconds=0))
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def pods(self, prefix: str = "") -> dict[str, Any]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns).items
                if p.metadata.name.startswith(prefix)}

    def set_phase(self, name: str, phase: str, message: str = "") -> None:
        status: dict[str, Any] = {"phase": phase}
        if message:
            status["message"] = message
        self.core.patch_namespaced_pod_status(name, self.ns, {"status": status})

    def run_all(self, prefix: str, phase: str = "Running") -> list[str]:
        names = sorted(n for n, p in self.pods(prefix).items()
                       if p.metadata.deletion_timestamp is None)
        for name in names:
            self.set_phase(name, phase)
        return names


def wait_for(what: str, check: Any, timeout: float = 30, tail: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last={last!r}\n{tail() if tail else ''}")
