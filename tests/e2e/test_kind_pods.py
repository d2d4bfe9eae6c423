"""The pod data plane on a Trainium-like kind cluster: the workers are two servers of one
UltraServer (EKS labels), the fake Neuron device plugin (`devicePlugin.enabled`) advertises
`aws.amazon.com/neuron` on each through the kubelet's real device plugin API, and jobs with a
`spec.template` run as pods scheduled by the real kube-scheduler and kubelet.

Shown here: pods land on exactly the Nodes of their allocation with the device counts of
their chips; the env the operator and the device plugin inject is right (the container prints
it, the test reads its log); a pod killed with `kubectl delete pod --force` makes RestartAll
recreate the job's pods; preemption ends the victim's pods before the preemptor's pods
exist (a victim pod may linger as an object once its containers have ended: it holds no
device then); deleting a job removes its pods and frees its chips.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import IMAGE
from tests.e2e.kinds import Kind, condition, neuron_workers, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

US = "kind-us-0"
JOBS_NS = "default"
NEURON = "aws.amazon.com/neuron"


@pytest.fixture(scope="module")
def trainium(release: Kind) -> dict[int, str]:
    """Server index -> Node, with the device plugin running and 4 chips allocatable on each."""
    return neuron_workers(release, US)


def job(name: str, chips: int, *, priority: int = 10, seconds: int = 3600, policy: str = "RestartAll") -> str:
    return f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, labels: {{e2e: pods}}}}
spec:
  chips: {chips}
  profile: trn3-gen2
  priority: {priority}
  topology: {{wholeServers: true}}
  failurePolicy: {policy}
  work: {{durationSeconds: 31536000}}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: trainer
          image: {IMAGE}
          command: [sh, -c, "env | sort; echo ready; sleep {seconds}"]
"""


def pods(kind: Kind, name: str) -> list[dict[str, Any]]:
    return [p for p in kind.items("pods", "-n", JOBS_NS, "-l", f"ultraplane.dev/job-name={name}")
            if p["metadata"].get("deletionTimestamp") is None]


def any_pods(kind: Kind, name: str) -> list[dict[str, Any]]:
    return kind.items("pods", "-n", JOBS_NS, "-l", f"ultraplane.dev/job-name={name}")


def running(kind: Kind, name: str, count: int) -> list[dict[str, Any]] | None:
    current = pods(kind, name)
    if len(current) == count and all(p["status"].get("phase") == "Running" for p in current):
        return current
    return None


def env_of(kind: Kind, pod: str) -> dict[str, str]:
    log = wait_until(f"{pod} printing its env", lambda: (
        out := kind.kc("logs", "-n", JOBS_NS, pod, check=False).stdout) and "ready" in out and out,
        timeout=120)
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def test_pods_land_on_their_allocated_nodes_with_their_devices_and_env(trainium: dict[int, str],
                                                                       release: Kind) -> None:
    release.apply(job("pods-env", 8, seconds=20), "-n", JOBS_NS)
    started = wait_until("2 pods of pods-env Running", lambda: running(release, "pods-env", 2), timeout=240)
    status = wait_until("pods-env Running", lambda: (b := release.get("trainingjob", "pods-env", "-n", JOBS_NS))
                        ["status"].get("phase") == "Running" and b["status"], timeout=120)
    servers = sorted(status["allocation"]["servers"])
    assert servers == [f"{US}/s00", f"{US}/s01"]
    by_rank = {int(p["metadata"]["labels"]["ultraplane.dev/rank"]): p for p in started}
    assert sorted(by_rank) == [0, 1]
    coordinator = None
    for rank, pod in by_rank.items():
        server = pod["metadata"]["annotations"]["ultraplane.dev/server"]
        index = int(server.rsplit("/s", 1)[1])
        assert pod["spec"]["nodeName"] == trainium[index], (server, pod["spec"]["nodeName"])
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits[NEURON] == "4"
        assert pod["metadata"]["ownerReferences"][0]["name"] == "pods-env"
        env = env_of(release, pod["metadata"]["name"])
        assert env["ULTRAPLANE_WORLD_SIZE"] == "2" and env["ULTRAPLANE_NODE_RANK"] == str(rank)
        assert env["ULTRAPLANE_LOCAL_CHIPS"] == "4" and env["ULTRAPLANE_TOTAL_CHIPS"] == "8"
        assert env["ULTRAPLANE_SERVER"] == server and env["ULTRAPLANE_ULTRASERVER"] == US
        assert sorted(env["ULTRAPLANE_LOCAL_CHIP_IDS"].split(",")) == [f"{server}/c{c:02d}" for c in range(4)]
        assert env["ULTRAPLANE_NEURON_CORES"] == "0-31"
        # Set by the fake device plugin's Allocate, through the real kubelet.
        assert env["AWS_NEURON_VISIBLE_DEVICES"] == "0,1,2,3", env.get("AWS_NEURON_VISIBLE_DEVICES")
        assert env["NEURON_RT_VISIBLE_CORES"] == "0-31"
        coordinator = coordinator or env["ULTRAPLANE_COORDINATOR_ADDR"]
        assert env["ULTRAPLANE_COORDINATOR_ADDR"] == coordinator
    assert coordinator is not None and coordinator.startswith("pods-env-0.")
    # The containers end after 20 s: the job succeeds and its chips come back.
    wait_until("pods-env Succeeded", lambda: release.get("trainingjob", "pods-env", "-n", JOBS_NS)
               ["status"].get("phase") == "Succeeded", timeout=240)
    wait_until(f"{US}'s 8 chips free", lambda: (release.get("ultraserver", US).get("status") or {})
               .get("free", {}).get("chips") == 8, timeout=120)
    release.kc("delete", "trainingjob", "pods-env", "-n", JOBS_NS, "--wait", timeout=120)


def test_a_force_deleted_pod_makes_restart_all_recreate_the_pods(trainium: dict[int, str],
                                                                  release: Kind) -> None:
    release.apply(job("pods-restart", 8), "-n", JOBS_NS)
    first = wait_until("2 pods Running", lambda: running(release, "pods-restart", 2), timeout=240)
    before = {p["metadata"]["uid"] for p in first}
    attempt = release.get("trainingjob", "pods-restart", "-n", JOBS_NS)["status"].get("attempt", 0)
    release.kc("delete", "pod", "-n", JOBS_NS, first[0]["metadata"]["name"], "--force", "--grace-period=0")
    again = wait_until("2 new pods Running after the restart", lambda: (
        (current := running(release, "pods-restart", 2))
        and not before & {p["metadata"]["uid"] for p in current} and current), timeout=300)
    status = release.get("trainingjob", "pods-restart", "-n", JOBS_NS)["status"]
    assert status["attempt"] > attempt
    assert {p["metadata"]["labels"]["ultraplane.dev/attempt"] for p in again} == {str(status["attempt"])}
    assert status["phase"] in ("Admitted", "Running")
    release.kc("delete", "trainingjob", "pods-restart", "-n", JOBS_NS, "--wait", timeout=120)


def test_preemption_removes_the_victims_pods_before_the_preemptors_start(trainium: dict[int, str],
                                                                         release: Kind) -> None:
    release.apply(job("pods-low", 8, priority=1), "-n", JOBS_NS)
    wait_until("pods-low Running", lambda: running(release, "pods-low", 2), timeout=240)
    release.apply(job("pods-high", 8, priority=100), "-n", JOBS_NS)
    samples = 0

    def preemptor_running() -> bool:
        nonlocal samples
        high, low = any_pods(release, "pods-high"), any_pods(release, "pods-low")
        samples += 1
        if high:
            # A victim pod whose containers have ended (its object may linger a moment while the
            # kubelet finishes) holds no device any more; a live one would.
            live = [p["metadata"]["name"] for p in low if p["status"].get("phase") not in ("Succeeded", "Failed")]
            assert not live, f"pods-high has pods while pods-low still has live pods {live}"
        return len(high) == 2 and all(p["status"].get("phase") == "Running" for p in high)
    wait_until("pods-high Running", preemptor_running, timeout=300, interval=0.3)
    assert samples > 1
    low = release.get("trainingjob", "pods-low", "-n", JOBS_NS)["status"]
    assert low["phase"] in ("Preempted", "Pending") and not (low.get("allocation") or {}).get("chips"), low
    assert condition(release.get("trainingjob", "pods-high", "-n", JOBS_NS), "Admitted") == "True"
    release.kc("delete", "trainingjob", "pods-high", "pods-low", "-n", JOBS_NS, "--wait", timeout=120)


def test_deleting_a_job_removes_its_pods_and_frees_its_chips(trainium: dict[int, str], release: Kind) -> None:
    release.apply(job("pods-delete", 8), "-n", JOBS_NS)
    wait_until("2 pods Running", lambda: running(release, "pods-delete", 2), timeout=240)
    release.kc("delete", "trainingjob", "pods-delete", "-n", JOBS_NS, "--wait=false")
    wait_until("the pods gone", lambda: not any_pods(release, "pods-delete"), timeout=180)
    wait_until(f"{US}'s 8 chips free", lambda: (release.get("ultraserver", US).get("status") or {})
               .get("free", {}).get("chips") == 8 and not release.get("ultraserver", US)["status"].get("jobs"),
               timeout=120)
    services = release.items("services", "-n", JOBS_NS, "-l", "ultraplane.dev/job-name=pods-delete")
    wait_until("the headless Service gone", lambda: not release.items(
        "services", "-n", JOBS_NS, "-l", "ultraplane.dev/job-name=pods-delete"), timeout=120,
        last=lambda: str([s["metadata"]["name"] for s in services]))
