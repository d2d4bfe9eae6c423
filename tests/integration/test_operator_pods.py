"""The pod data plane on a real API server: pods on the allocation's Nodes, phases from pods.

There is no kubelet in this tier: `PlayedKubelet` sets pod phases and finishes graceful
deletions as one would. Each test's UltraServer is named after its namespace, gets Nodes for
a few servers only, and has every other server cordoned, so the allocator places only where a
Node exists (except where a test wants a server without one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.operator_harness import GROUP, VERSION, Harness
from tests.integration.pod_kubelets import PlayedKubelet, delete_nodes, make_nodes, node_name
from ultraplane.ids import parse_chip_ranges

TEMPLATE = {"metadata": {"labels": {"team": "llm"}},
            "spec": {"containers": [{"name": "train", "image": "busybox:1.36",
                                     "command": ["sh", "-c", "env; sleep 3600"]}]}}


@pytest.fixture
def kubelet(op: Harness) -> Iterator[PlayedKubelet]:
    from kubernetes import client

    core = client.CoreV1Api(op.env.api_client())
    with PlayedKubelet(core, op.ns) as k:
        yield k
    for us in (f"{op.ns}-a", f"{op.ns}-b"):
        delete_nodes(core, us)


def fleet(op: Harness, kubelet: PlayedKubelet, servers: int, *, nodes: int | None = None,
          name: str = "a") -> str:
    """One Gen2 UltraServer with `servers` usable servers, Nodes for the first `nodes`."""
    us = f"{op.ns}-{name}"
    make_nodes(kubelet.core, us, range(servers if nodes is None else nodes))
    op.ultraserver(us, cordonedServers=list(range(servers, 36)))
    return us


def job(op: Harness, name: str, chips: int, *, kind: str = "TrainingJob",
        template: dict[str, Any] | None = None, **spec: Any) -> None:
    body: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
                            "metadata": {"name": name, "namespace": op.ns}}
    if kind == "TrainingJob":
        body["spec"] = {"chips": chips, "model": {"name": "llama"},
                        "work": {"durationSeconds": 600}, "template": template or TEMPLATE,
                        **spec}
        plural = "trainingjobs"
    else:
        body["spec"] = {"chipsPerReplica": chips, "model": {"name": "llama"},
                        "load": {"requestsPerSecond": 10}, "template": template or TEMPLATE,
                        **spec}
        plural = "inferencejobs"
    op.api.create_namespaced_custom_object(GROUP, VERSION, op.ns, plural, body)


def live(kubelet: PlayedKubelet, prefix: str) -> dict[str, Any]:
    return {n: p for n, p in kubelet.pods(prefix).items() if p.metadata.deletion_timestamp is None}


def n_pods(kubelet: PlayedKubelet, prefix: str, n: int) -> dict[str, Any] | None:
    found = live(kubelet, prefix)
    return found if len(found) == n else None


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env}


def test_pods_land_on_the_allocated_nodes_with_devices_env_and_a_service(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    us = fleet(op, kubelet, 3)
    op.start()
    job(op, "llama", 10)
    body = op.phase("llama", "Admitted")
    servers = body["status"]["allocation"]["servers"]
    pods = op.wait("3 pods", lambda: n_pods(kubelet, "llama-", 3))
    by_rank = sorted(pods.values(), key=lambda p: int(p.metadata.labels["ultraplane.dev/rank"]))
    assert [p.spec.node_name for p in by_rank] == [
        node_name(us, int(s.split("/s")[1])) for s in sorted(servers)]
    chips = [p.spec.containers[0].resources.limits["aws.amazon.com/neuron"] for p in by_rank]
    assert sorted(int(c) for c in chips) == [2, 4, 4]
    assert all(p.metadata.owner_references[0].uid == body["metadata"]["uid"] for p in by_rank)
    env = env_of(by_rank[1])
    assert env["ULTRAPLANE_WORLD_SIZE"] == "3" and env["ULTRAPLANE_NODE_RANK"] == "1"
    assert env["ULTRAPLANE_COORDINATOR_ADDR"] == f"llama-0.llama.{op.ns}.svc"
    assert env["ULTRAPLANE_SERVER"] == sorted(servers)[1]
    assert sorted(parse_chip_ranges(env["ULTRAPLANE_CHIP_IDS"])) == sorted(
        body["status"]["allocation"]["chips"])
    svc = kubelet.core.read_namespaced_service("llama", op.ns)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    assert by_rank[0].spec.hostname == "llama-0" and by_rank[0].spec.subdomain == "llama"

    kubelet.run_all("llama-", "Running")
    running = op.phase("llama", "Running")
    assert running["status"]["reason"] == "PodsRunning"
    kubelet.set_phase(by_rank[0].metadata.name, "Succeeded")  # rank 0 ends a training job
    op.phase("llama", "Succeeded")
    op.wait("the other pods deleted", lambda: n_pods(kubelet, "llama-", 1))
    op.wait("chips released", lambda: op.get_ultraserver(us)["status"]["allocated"]["chips"] == 0)


def test_restart_all_recreates_every_pod_after_a_pod_fails(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    fleet(op, kubelet, 2)
    op.start()
    job(op, "ra", 8, failurePolicy="RestartAll")
    first = op.wait("2 pods", lambda: n_pods(kubelet, "ra-", 2))
    kubelet.run_all("ra-")
    op.phase("ra", "Running")
    kubelet.set_phase(sorted(first)[1], "Failed", "exit code 137")
    op.wait("restarted", lambda: (op.get("ra")["status"].get("restarts") or 0) == 1)
    second = op.wait("2 new pods", lambda: (p := n_pods(kubelet, "ra-", 2))
                     and not set(p) & set(first) and p)
    assert all(n.endswith("-a2") for n in second)
    status = op.get("ra")["status"]
    assert status["attempt"] == 2
    kubelet.run_all("ra-")
    op.phase("ra", "Running")


def test_replace_affected_moves_only_the_failed_servers_pod(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    fleet(op, kubelet, 3)
    op.start()
    job(op, "rep", 8, failurePolicy="ReplaceAffected")
    before = op.wait("2 pods", lambda: n_pods(kubelet, "rep-", 2))
    kubelet.run_all("rep-")
    op.phase("rep", "Running")
    failed = next(n for n, p in before.items() if p.metadata.labels["ultraplane.dev/rank"] == "1")
    kept = next(n for n in before if n != failed)
    kubelet.set_phase(failed, "Failed", "node lost")
    body = op.wait("replaced", lambda: (b := op.get("rep"))["status"].get("reason") == "PodReplaced"
                   and b)
    after = op.wait("a new pod beside the kept one", lambda: (p := n_pods(kubelet, "rep-", 2))
                    and kept in p and failed not in p and p)
    new = next(p for n, p in after.items() if n != kept)
    assert new.spec.node_name != before[failed].spec.node_name
    assert after[kept].metadata.labels["ultraplane.dev/attempt"] == str(body["status"]["attempt"])
    kubelet.run_all("rep-")
    op.phase("rep", "Running")


def test_fail_policy_and_force_deleted_pods(op: Harness, kubelet: PlayedKubelet) -> None:
    fleet(op, kubelet, 2)
    op.start()
    job(op, "f", 4, failurePolicy="Fail")
    job(op, "g", 4, failurePolicy="RestartAll")
    pods_f = op.wait("f's pod", lambda: n_pods(kubelet, "f-", 1))
    pods_g = op.wait("g's pod", lambda: n_pods(kubelet, "g-", 1))
    kubelet.run_all("f-")
    kubelet.run_all("g-")
    op.phase("f", "Running")
    kubelet.set_phase(next(iter(pods_f)), "Failed", "exit code 1")
    failed = op.phase("f", "Failed")
    assert failed["status"]["reason"] == "PodFailed" and "exit code 1" in failed["status"]["message"]
    from kubernetes.client import V1DeleteOptions

    kubelet.core.delete_namespaced_pod(next(iter(pods_g)), op.ns,
                                       body=V1DeleteOptions(grace_period_seconds=0))
    op.wait("g restarted", lambda: (op.get("g")["status"].get("restarts") or 0) == 1)
    assert "was deleted" in op.get("g")["status"]["message"] or op.get("g")["status"]["attempt"] > 1
    op.wait("g's new pod", lambda: n_pods(kubelet, "g-", 1))


def test_preemption_removes_the_victims_pods_before_the_preemptor_starts(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    us = fleet(op, kubelet, 2)
    op.start()
    job(op, "low", 8, priority=0)
    op.wait("low's pods", lambda: n_pods(kubelet, "low-", 2))
    kubelet.run_all("low-")
    op.phase("low", "Running")
    kubelet.hold.add("low-")  # the victim's containers take their time to stop
    job(op, "high", 8, priority=10)
    op.wait("low preempted", lambda: (op.get("low")["status"].get("preemptions") or 0) == 1)
    op.phase("high", "Admitted")
    op.wait("low's pods terminating", lambda: all(
        p.metadata.deletion_timestamp is not None for p in kubelet.pods("low-").values()))
    assert all(p.spec.termination_grace_period_seconds == 120
               for p in kubelet.pods("low-").values())
    assert not kubelet.pods("high-"), "the preemptor started before its victim's pods were gone"
    kubelet.hold.clear()
    op.wait("high's pods", lambda: n_pods(kubelet, "high-", 2))
    assert not kubelet.pods("low-")
    # UltraServer status is a view written at most once per interval: wait for it
    op.wait("the UltraServer to count high's chips", lambda: (
        (op.get_ultraserver(us).get("status") or {}).get("allocated") or {}).get("chips") == 8)


def test_deleting_a_job_deletes_its_pods_and_frees_its_chips(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    us = fleet(op, kubelet, 2)
    op.start()
    job(op, "gone", 8)
    op.wait("pods", lambda: n_pods(kubelet, "gone-", 2))
    op.delete("gone")
    op.gone("gone")
    op.wait("pods deleted", lambda: not kubelet.pods("gone-"))
    op.wait("chips released", lambda: op.get_ultraserver(us)["status"]["allocated"]["chips"] == 0)
    op.wait("service deleted", lambda: not kubelet.core.list_namespaced_service(op.ns).items)


def test_an_inference_job_runs_one_group_of_pods_per_replica(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    fleet(op, kubelet, 4)
    op.start()
    job(op, "chat", 8, kind="InferenceJob", replicas=2, topology={"wholeServers": True})
    pods = op.wait("4 pods", lambda: n_pods(kubelet, "chat-", 4))
    groups = sorted((p.metadata.labels["ultraplane.dev/group"],
                     p.metadata.labels["ultraplane.dev/rank"]) for p in pods.values())
    assert groups == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    coord = {env_of(p)["ULTRAPLANE_COORDINATOR_ADDR"] for p in pods.values()}
    assert coord == {f"chat-r0-0.chat.{op.ns}.svc", f"chat-r1-0.chat.{op.ns}.svc"}
    kubelet.run_all("chat-")

    def phase() -> bool:
        body = op.api.get_namespaced_custom_object(GROUP, VERSION, op.ns, "inferencejobs", "chat")
        return (body.get("status") or {}).get("phase") == "Running"

    op.wait("chat Running", phase)


def test_bad_templates_and_missing_nodes_fail_the_job_with_a_sentence(
    op: Harness, kubelet: PlayedKubelet
) -> None:
    fleet(op, kubelet, 2, nodes=1)
    op.start()
    bad = {"spec": {"containers": [{"name": "Not_A_Dns_Label", "image": "busybox"}]}}
    job(op, "bad", 4, template=bad)
    failed = op.phase("bad", "Failed")
    assert failed["status"]["reason"] == "PodRejected"
    assert "Not_A_Dns_Label" in failed["status"]["message"], failed["status"]["message"]
    assert not kubelet.pods("bad-")
    job(op, "wide", 8)  # one of its two servers has no Node
    failed = op.phase("wide", "Failed")
    assert failed["status"]["reason"] == "NoNodeForServer"
    assert "no Node for allocated server" in failed["status"]["message"]
    assert "ultraplane.dev/server-index" in failed["status"]["message"]
    assert op.proc is not None and op.proc.poll() is None  # no crash loop
