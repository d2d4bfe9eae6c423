"""Moves on a real API server, through the operator: a running job is moved to other chips so
that another team's gang within its unused quota finds one UltraServer.

Fleet (the test's own, labelled with its namespace): two UltraServers of 4 usable servers
(16 chips each, the other servers cordoned), a Node for each usable server. One cohort of two
queues, 16 chips each: A (this namespace) and B (a second namespace).

    X [ a1 a1 | .. .. ]    a1: 8 chips, saves on notice within 45 s
    Y [ a2 a2 | .. .. ]    a2: 8 chips, not movable

A holds its 16 nominal chips, half of each UltraServer (a filler job of A's packed X, then left).
B's 16-chip gang is within B's unused quota but fits no UltraServer, and reclaim may take
nothing (A is within its own quota). The operator moves a1 onto Y's free half: a1's status
says so first, its old pods are deleted with its 45 s grace period, B's gang is admitted on X,
and its pods start only once a1's old pods are gone; a1's new pods start on Y. A watch of both
namespaces' jobs checks every version it sees: no chip is in two recorded allocations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness
from tests.integration.pod_kubelets import PlayedKubelet, delete_nodes, make_nodes, node_name
from tests.integration.test_operator_pods import TEMPLATE
from tests.integration.test_operator_queues import queue, status, submit, team_b

__all__ = ["team_b"]  # the fixture, used by name

HOLDING = ("Admitted", "Running")
LONG = {"durationSeconds": 36_000}  # predicted to run 10 h: B's wait without a move is long


class ChipWatch:
    """Every version of the jobs of `namespaces` in the API server's order (one cluster-wide
    watch): after each, the chips recorded by jobs holding chips, and any chip in two."""

    def __init__(self, api: Any, namespaces: set[str]) -> None:
        self.api = api
        self.namespaces = namespaces
        self.held: dict[str, list[str]] = {}
        self.doubles: list[tuple[str, list[str]]] = []
        self.versions = 0
        self.restarts = 0  # watches started again from a listing
        self.reasons: dict[str, list[str]] = {}  # job -> the reasons it went through
        self._stop = threading.Event()
        self._rv = ""
        self._list()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _list(self) -> None:
        """Start (or start again after an expired watch) from one consistent listing."""
        listed = self.api.list_cluster_custom_object(GROUP, VERSION, "trainingjobs")
        self.held.clear()
        for body in listed["items"]:
            self._see("ADDED", body)
        self._rv = listed["metadata"]["resourceVersion"]

    def __enter__(self) -> ChipWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _loop(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    self.api.list_cluster_custom_object, GROUP, VERSION, "trainingjobs",
                    resource_version=self._rv, timeout_seconds=2)
                for event in stream:
                    if event["type"] == "ERROR":  # the version expired: list again
                        raise RuntimeError(event["object"])
                    body = event["object"]
                    self._rv = body["metadata"]["resourceVersion"]
                    self._see(event["type"], body)
            except Exception:
                self.restarts += 1
                while not self._stop.wait(0.2):  # until a listing answers
                    try:
                        self._list()
                        break
                    except Exception:
                        continue

    def _see(self, kind: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        if meta["namespace"] not in self.namespaces:
            return
        key = f"{meta['namespace']}/{meta['name']}"
        st = body.get("status") or {}
        self.versions += 1
        if st.get("reason"):
            seen = self.reasons.setdefault(key, [])
            if not seen or seen[-1] != st["reason"]:
                seen.append(st["reason"])
        if kind == "DELETED" or st.get("phase") not in HOLDING:
            self.held.pop(key, None)
        else:
            self.held[key] = list((st.get("allocation") or {}).get("chips") or [])
        owners: dict[str, str] = {}
        for job, chips in self.held.items():
            for chip in chips:
                if chip in owners:
                    self.doubles.append((chip, sorted({owners[chip], job})))
                owners[chip] = job


@pytest.fixture
def kubelets(op: Harness, team_b: str) -> Iterator[tuple[PlayedKubelet, PlayedKubelet]]:
    from kubernetes import client

    core = client.CoreV1Api(op.env.api_client())
    with PlayedKubelet(core, op.ns) as a, PlayedKubelet(core, team_b) as b:
        yield a, b
    for us in ("x", "y"):
        delete_nodes(core, f"{op.ns}-{us}")


def live(kubelet: PlayedKubelet, prefix: str) -> dict[str, Any]:
    return {n: p for n, p in kubelet.pods(prefix).items() if p.metadata.deletion_timestamp is None}


def ultraservers(st: dict[str, Any]) -> list[str]:
    return list(st["allocation"]["ultraServers"])


def test_a_running_job_is_moved_to_make_room_for_another_teams_gang_within_its_quota(
        op: Harness, team_b: str, kubelets: tuple[PlayedKubelet, PlayedKubelet]) -> None:
    kubelet, kubelet_b = kubelets
    qa, qb = f"{op.ns}-qa", f"{op.ns}-qb"
    queue(op, qa, nominal={"trn3-gen2": 16}, cohort=op.ns, namespaces=[op.ns],
          defaultFor=[op.ns])
    queue(op, qb, nominal={"trn3-gen2": 16}, cohort=op.ns, namespaces=[team_b])
    for us in ("x", "y"):
        make_nodes(kubelet.core, f"{op.ns}-{us}", range(4))
        op.ultraserver(f"{op.ns}-{us}", cordonedServers=list(range(4, 36)))
    op.start("-n", team_b)

    with ChipWatch(op.api, {op.ns, team_b}) as chips:
        submit(op, op.ns, "a1", 8, template=TEMPLATE, work=LONG,
               checkpoint={"onNotice": True, "gracePeriodSeconds": 45})
        (x,) = ultraservers(op.phase("a1", "Admitted", timeout=60)["status"])
        submit(op, op.ns, "fill", 8, work=LONG)  # packs X, so a2 opens Y
        assert ultraservers(op.phase("fill", "Admitted", timeout=60)["status"]) == [x]
        submit(op, op.ns, "a2", 8, template=TEMPLATE, work=LONG, movable=False)
        (y,) = ultraservers(op.phase("a2", "Admitted", timeout=60)["status"])
        assert y != x
        old = op.wait("a1's pods", lambda: (p := live(kubelet, "a1-")) and len(p) == 2 and p)
        assert all(p.spec.node_name.startswith(f"{x}-n") for p in old.values())
        kubelet.run_all("a1-")
        op.phase("a1", "Running", timeout=60)
        kubelet.hold |= set(old)  # a1's old pods stay terminating until let go
        op.delete("fill")
        op.gone("fill")

        submit(op, team_b, "b", 16, queueName=qb, template=TEMPLATE)
        a1 = op.wait("a1 moved", lambda: (s := op.get("a1")["status"]).get(
            "reason") == "Moved" and s, timeout=60)
        assert ultraservers(a1) == [y]
        assert a1["restarts"] == 1
        assert f"Moved from UltraServer {x} to {y}" in a1["message"]
        assert f"make room for job tj/{team_b}/b of queue {qb}" in a1["message"]
        b = op.wait("b admitted", lambda: (s := status(op, team_b, "b")).get(
            "phase") == "Admitted" and s, timeout=60)
        assert ultraservers(b) == [x]
        assert status(op, op.ns, "a2")["allocation"]["ultraServers"] == [y]  # not movable

        # a1's old pods were told to stop with its checkpoint grace period
        terminating = op.wait("a1's old pods deleted with 45 s", lambda: (
            p := {n: q for n, q in kubelet.pods("a1-").items() if n in old})
            and all(q.metadata.deletion_timestamp is not None for q in p.values()) and p)
        assert {q.metadata.deletion_grace_period_seconds for q in terminating.values()} == {45}
        assert not kubelet_b.pods("b-")  # b's pods wait for the chips a1's old pods hold
        events = op.wait("an Event naming the move", lambda: [
            e for e in kubelet.core.list_namespaced_event(op.ns).items
            if e.reason == "Moved" and e.involved_object.name == "a1"])
        assert "make room for" in events[0].message

        kubelet.hold.clear()  # the old pods save and go
        new = op.wait("a1's new pods", lambda: (p := live(kubelet, "a1-")) and len(p) == 2
                      and not set(p) & set(old) and p, timeout=60)
        assert all(p.spec.node_name.startswith(f"{y}-n") for p in new.values())
        b_pods = op.wait("b's pods", lambda: (p := live(kubelet_b, "b-")) and len(p) == 4 and p,
                         timeout=60)
        assert {p.spec.node_name for p in b_pods.values()} == {node_name(x, i) for i in range(4)}
        kubelet.run_all("a1-")
        op.wait("a1 running again", lambda: op.get("a1")["status"].get("phase") == "Running",
                timeout=60)

    assert chips.versions > 10, chips.versions  # the watch saw the whole story
    assert "Moved" in chips.reasons.get(f"{op.ns}/a1", []), chips.reasons
    assert not chips.doubles, chips.doubles[:5]
