"""`kubectl scale` on InferenceJobs, on a real API server with the operator and its pods: 200
changes of spec.replicas through the scale subresource across 20 jobs, two at a time per job
before the operator catches up. Replicas that stay keep their pods (same UIDs, never
restarted), no chip is ever in two allocations or under two live pods, and once settled
every job holds exactly its replicas, each with its one running pod.

There is no kubelet in this tier: `PlayedKubelet` finishes graceful deletions and the test
sets new pods Running, as a kubelet would report them. The fleet is two Gen2 UltraServers
with a Node per server (72 servers); each replica is one whole server (4 chips), and 20 jobs
of at most 3 replicas always fit, so every scale-up settles."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness
from tests.integration.pod_kubelets import PlayedKubelet, delete_nodes, make_nodes
from ultraplane.ids import parse_chip_ranges

JOBS, ROUNDS, PER_ROUND = 20, 5, 2  # 20 jobs x 5 rounds x 2 changes = 200 scale changes
MAX_REPLICAS = 3
TEMPLATE = {"spec": {"containers": [{"name": "serve", "image": "busybox:1.36",
                                     "command": ["sh", "-c", "sleep 3600"]}]}}


@pytest.fixture
def kubelet(op: Harness) -> Iterator[PlayedKubelet]:
    from kubernetes import client

    core = client.CoreV1Api(op.env.api_client())
    with PlayedKubelet(core, op.ns, interval=0.1) as k:
        yield k
    for us in (f"{op.ns}-a", f"{op.ns}-b"):
        delete_nodes(core, us)


def names() -> list[str]:
    return [f"svc{i:02d}" for i in range(JOBS)]


def create(op: Harness, name: str, replicas: int) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceJob",
            "metadata": {"name": name, "namespace": op.ns},
            "spec": {"replicas": replicas, "chipsPerReplica": 4,
                     "topology": {"wholeServers": True}, "profile": "trn3-gen2",
                     "model": {"name": "llama"}, "load": {"requestsPerSecond": 10},
                     "template": TEMPLATE}}
    op.api.create_namespaced_custom_object(GROUP, VERSION, op.ns, "inferencejobs", body)


def scale(op: Harness, name: str, replicas: int) -> None:
    """What `kubectl scale inferencejob NAME --replicas N` sends: a patch of /scale."""
    op.api.patch_namespaced_custom_object_scale(
        GROUP, VERSION, op.ns, "inferencejobs", name, {"spec": {"replicas": replicas}},
        _content_type="application/merge-patch+json")


class Observer:
    """Reads the jobs and pods, checking at every read that no chip is double-booked."""

    def __init__(self, op: Harness, kubelet: PlayedKubelet) -> None:
        self.op, self.kubelet = op, kubelet
        self.reads = 0

    def jobs(self) -> dict[str, dict[str, Any]]:
        items = self.op.api.list_namespaced_custom_object(
            GROUP, VERSION, self.op.ns, "inferencejobs")["items"]
        bodies = {b["metadata"]["name"]: b for b in items}
        booked = Counter(c for b in bodies.values()
                         for r in ((b.get("status") or {}).get("allocation") or {}).get(
                             "replicas") or () for c in r["chips"])
        twice = [c for c, n in booked.items() if n > 1]
        assert not twice, f"chips in two allocations: {twice[:5]}"
        self.reads += 1
        return bodies

    def pods(self) -> dict[tuple[str, int], Any]:
        """(job, replica) -> its pod (any pod not yet gone, terminating ones included)."""
        found: dict[tuple[str, int], Any] = {}
        held = Counter[str]()
        for pod in self.kubelet.pods().values():
            labels = pod.metadata.labels or {}
            job = labels.get("ultraplane.dev/job-name")
            if job is None:
                continue
            held.update(parse_chip_ranges(pod.metadata.annotations["ultraplane.dev/chips"]))
            if pod.metadata.deletion_timestamp is None:
                found[(job, int(labels["ultraplane.dev/group"]))] = pod
        twice = [c for c, n in held.items() if n > 1]
        assert not twice, f"chips under two pods: {twice[:5]}"
        return found

    def settled(self, want: dict[str, int]) -> dict[tuple[str, int], str] | None:
        """Pod UIDs by (job, replica) once every job holds exactly its replicas, each with one
        running pod, and says so in its status; None before. Sets new pods Running."""
        pods = self.pods()
        for (_, _), pod in pods.items():
            if (pod.status.phase or "Pending") == "Pending":
                self.kubelet.set_phase(pod.metadata.name, "Running")
        jobs = self.jobs()
        for name, n in want.items():
            status = jobs[name].get("status") or {}
            replicas = (status.get("allocation") or {}).get("replicas") or []
            if [r["index"] for r in replicas] != list(range(n)) or status.get("replicas") != n \
                    or status.get("readyReplicas") != n or status.get("desiredReplicas") != n:
                return None
            if {i for (job, i) in pods if job == name} != set(range(n)):
                return None
            if any(pods[(name, i)].status.phase != "Running" for i in range(n)):
                return None
        return {key: pod.metadata.uid for key, pod in pods.items()}


def test_200_kubectl_scale_changes_keep_untouched_replicas_and_never_double_book(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    rng = random.Random(36)
    for us in (f"{op.ns}-a", f"{op.ns}-b"):
        make_nodes(kubelet.core, us, range(36))
        op.ultraserver(us)
    op.start()
    want = {name: rng.randint(1, MAX_REPLICAS) for name in names()}
    for name, n in want.items():
        create(op, name, n)
    seen = Observer(op, kubelet)
    uids = op.wait("the jobs to run", lambda: seen.settled(want), timeout=60)
    changes = 0
    for _ in range(ROUNDS):
        kept = dict(want)  # per job: replicas below this index must keep their pods
        for _ in range(PER_ROUND):  # back to back: the operator sees some edits together
            for name in names():
                n = rng.choice([k for k in range(1, MAX_REPLICAS + 1) if k != want[name]])
                scale(op, name, n)
                want[name] = n
                kept[name] = min(kept[name], n)
                changes += 1
        now = op.wait("the jobs to settle", lambda: seen.settled(want), timeout=60)
        for name, n in kept.items():
            for i in range(n):
                assert now[(name, i)] == uids[(name, i)], f"{name} replica {i} restarted"
        uids = now
    assert changes == 200
    jobs = seen.jobs()
    for name, n in want.items():
        status = jobs[name]["status"]
        assert status["attempt"] == 1 and not status.get("restarts"), status  # never requeued
        assert jobs[name]["spec"]["replicas"] == n == len(status["allocation"]["replicas"])
        assert all(len(r["chips"]) == 4 for r in status["allocation"]["replicas"])
    assert seen.reads > ROUNDS  # the double-booking check ran at every read


def test_a_restarted_operator_keeps_rescaled_replicas_and_follows_edits_made_while_down(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    # svc00 runs 3 replicas, is scaled to 1; the operator is killed; svc00 is scaled to 2 and
    # svc01 from 2 to 1 while no operator runs. The next one re-adopts what the statuses name
    # and follows both edits: replica 0 of each keeps its pod.
    us = f"{op.ns}-a"
    make_nodes(kubelet.core, us, range(36))
    op.ultraserver(us)
    op.start()
    want = {"svc00": 3, "svc01": 2}
    for name, n in want.items():
        create(op, name, n)
    seen = Observer(op, kubelet)
    op.wait("the jobs to run", lambda: seen.settled(want), timeout=60)
    scale(op, "svc00", 1)
    want["svc00"] = 1
    before = op.wait("svc00 to shrink", lambda: seen.settled(want), timeout=60)
    chips = {n: seen.jobs()[n]["status"]["allocation"]["replicas"][0]["chips"] for n in want}
    op.kill9()
    scale(op, "svc00", 2)
    scale(op, "svc01", 1)
    want = {"svc00": 2, "svc01": 1}
    op.start()
    after = op.wait("the jobs to settle again", lambda: seen.settled(want), timeout=60)
    jobs = seen.jobs()
    for name in want:
        assert after[(name, 0)] == before[(name, 0)], f"{name} replica 0 restarted"
        assert jobs[name]["status"]["allocation"]["replicas"][0]["chips"] == chips[name]
        assert jobs[name]["status"]["attempt"] == 1
