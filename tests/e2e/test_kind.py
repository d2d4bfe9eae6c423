"""The product on a real multi-node kind cluster, as a user runs it (README, "Try it on kind").

The chart is installed with the README's command; then the examples are applied with kubectl,
the REST API is used through its Service, the chart's RBAC is tried with the operator's own
ServiceAccount, the active operator pod is deleted in the middle of a churn of 200 jobs, and
the chart is upgraded with jobs running. Every check reads what a user can read: job and
UltraServer statuses, pods, the API's answers.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import NAMESPACE, RELEASE
from tests.e2e.kinds import Kind, condition, held_chips, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The example jobs short enough to finish at the e2e time scale; the others keep running.
FINISHING = [("trainingjob", "finetune-8b")]
JOBS_NS = "default"


def components(kind: Kind) -> dict[str, list[dict[str, Any]]]:
    pods = kind.items("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}")
    by: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by.setdefault(pod["metadata"]["labels"].get("app.kubernetes.io/component", ""), []).append(pod)
    return by


def ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready") == "True" and pod["metadata"].get("deletionTimestamp") is None


def ultraservers(kind: Kind) -> dict[str, dict[str, Any]]:
    return {us["metadata"]["name"]: us for us in kind.items("ultraservers")}


def jobs(kind: Kind, *selector: str) -> list[dict[str, Any]]:
    return kind.items("trainingjobs,inferencejobs", "-A", *selector)


def free_chips(kind: Kind, names: list[str]) -> dict[str, int]:
    by = ultraservers(kind)
    return {n: int(((by[n].get("status") or {}).get("free") or {}).get("chips", -1)) for n in names}


def idle(kind: Kind, names: list[str]) -> dict[str, int] | None:
    """Free chips per UltraServer once every one has a status and holds no job; None before.
    (The example fleet has failed chips and an unschedulable UltraServer, so "all free" is
    this baseline, not the capacity.)"""
    by = ultraservers(kind)
    free: dict[str, int] = {}
    for n in names:
        status = by[n].get("status") or {}
        if "free" not in status or status.get("jobs") or (status.get("allocated") or {}).get("chips"):
            return None
        free[n] = int(status["free"]["chips"])
    return free


def sa_token(kind: Kind, namespace: str, name: str) -> str:
    return kind.kubectl_out("-n", namespace, "create", "token", name, "--duration=1h").strip()


def http(method: str, url: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode(errors="replace")


def test_components_are_ready_under_their_own_service_accounts(release: Kind) -> None:
    by = wait_until("2 operator, 1 simulator and 1 API pod Ready",
                    lambda: (c := components(release))
                    and sum(map(ready, c.get("operator", []))) == 2
                    and sum(map(ready, c.get("simulator", []))) == 1
                    and sum(map(ready, c.get("api", []))) == 1 and c,
                    timeout=300, last=lambda: str({k: len(v) for k, v in components(release).items()}))
    accounts = {name: {p["spec"]["serviceAccountName"] for p in pods} for name, pods in by.items()}
    for name, names in accounts.items():
        assert len(names) == 1 and "default" not in names, (name, names)
    assert len({next(iter(n)) for n in accounts.values()}) == len(accounts), accounts
    # The operator pods are spread over the cluster's nodes like any workload.
    nodes = {n["metadata"]["name"] for n in release.items("nodes")}
    assert len(nodes) >= 3
    for pods in by.values():
        for pod in pods:
            assert pod["spec"]["nodeName"] in nodes
            assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_operator_account_is_refused_what_the_chart_does_not_grant(release: Kind) -> None:
    pod = components(release)["operator"][0]
    account = pod["spec"]["serviceAccountName"]
    token = sa_token(release, NAMESPACE, account)
    # Granted: reading UltraServers and writing job statuses.
    assert release.kc_as(token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout \
        == f"system:serviceaccount:{NAMESPACE}:{account}"
    release.kc_as(token, "get", "ultraservers")
    subject = f"system:serviceaccount:{NAMESPACE}:{account}"
    assert release.kubectl_out("auth", "can-i", "patch", "trainingjobs/status", "--as", subject,
                               "-A").strip() == "yes"
    # Refused: secrets, deleting nodes or namespaces (the API server says Forbidden).
    for verb, question in ((("get", "secrets", "-n", "kube-system"), ("get", "secrets", "-n", "kube-system")),
                           (("delete", "namespace", JOBS_NS, "--dry-run=server"), ("delete", "namespaces")),
                           (("delete", "nodes", "--all", "--dry-run=server"), ("delete", "nodes"))):
        result = release.kc_as(token, *verb, check=False)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (verb, result.stderr)
        can = release.kc("auth", "can-i", *question, "--as", subject, check=False)
        assert (can.returncode, can.stdout.strip()) == (1, "no"), (verb, can.stdout)


def test_the_examples_are_admitted_run_succeed_and_give_their_chips_back(release: Kind) -> None:
    release.kc("apply", "-f", str(EXAMPLES / "fleet-gen2.yaml"))
    fleet = sorted(ultraservers(release))
    baseline = wait_until("the operator to write every UltraServer's status",
                          lambda: idle(release, fleet), timeout=180)
    assert sum(baseline.values()) > 1000
    release.kc("apply", "-n", JOBS_NS, "-f", str(EXAMPLES))
    try:
        finish_the_examples(release)
    finally:  # the later tests start from an idle fleet, whatever this one saw
        release.kc("delete", "-n", JOBS_NS, "trainingjobs,inferencejobs", "--all", "--wait",
                   timeout=300)
    wait_until("every chip free again", lambda: idle(release, fleet) == baseline, timeout=180,
               last=lambda: str(free_chips(release, fleet)))


def test_a_tenant_queue_applied_with_kubectl_admits_within_its_quota_and_holds_the_rest(
        release: Kind) -> None:
    # A 16-chip quota, the default queue of its namespace: of two 16-chip jobs, one runs and
    # one waits with the queue's reason in its status.
    release.kc("apply", "-f", str(EXAMPLES / "fleet-gen2.yaml"))
    ns, queue = "quota-e2e", "quota-e2e"
    release.kc("create", "namespace", ns)
    try:
        release.apply(f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TenantQueue
metadata: {{name: {queue}}}
spec:
  nominal: {{trn3-gen2: 16}}
  namespaces: [{ns}]
  defaultFor: [{ns}]
""")
        for name in ("first", "second"):
            release.apply(f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  chips: 16
  topology: {{requiredLevel: ultraserver}}
  work: {{durationSeconds: 86400}}
""", "-n", ns)

        def decided() -> dict[str, dict[str, Any]] | None:
            by = {j["metadata"]["name"]: j.get("status") or {}
                  for j in release.items("trainingjobs", "-n", ns)}
            phases = sorted(s.get("phase") or "" for s in by.values())
            return by if phases in (["Admitted", "Pending"], ["Pending", "Running"]) and any(
                s.get("reason") == "NoQuota" for s in by.values()) else None
        by = wait_until("one job admitted, one held by its quota", decided, timeout=180,
                        last=lambda: str(release.items("trainingjobs", "-n", ns)))
        held = next(s for s in by.values() if s.get("phase") == "Pending")
        assert f"queue {queue}" in held["message"] and "16 chips" in held["message"]
        status = wait_until("the queue's status", lambda: (lambda s: s if s.get(
            "usedChips") == 16 and s.get("pendingJobs") == 1 else None)(
            release.get("tenantqueue", queue).get("status") or {}), timeout=120)
        assert status["nominalChips"] == 16 and status["borrowedChips"] == 0
    finally:
        release.kc("delete", "namespace", ns, "--wait", timeout=300, check=False)
        release.kc("delete", "tenantqueue", queue, "--ignore-not-found", check=False)


def test_a_power_budget_applied_with_kubectl_holds_jobs_until_it_is_lifted(release: Kind) -> None:
    # A fleet-wide budget below the fleet's idle draw: a new job waits for headroom with the
    # budget named in its status; deleting the budget lets it in.
    release.kc("apply", "-f", str(EXAMPLES / "fleet-gen2.yaml"))
    ns, name = "power-e2e", "e2e-hall"
    release.kc("create", "namespace", ns)
    try:
        release.apply(f"""
apiVersion: ultraplane.dev/v1alpha1
kind: PowerBudget
metadata: {{name: {name}}}
spec:
  watts: 1000
  policy: Predicted
""")
        status = wait_until("the budget's status", lambda: (lambda s: s if s.get(
            "predictedWatts") else None)(release.get("powerbudget", name).get("status") or {}),
            timeout=120)
        assert status["headroomWatts"] < 0 and status["ultraServers"] > 0
        release.apply("""
apiVersion: ultraplane.dev/v1alpha1
kind: TrainingJob
metadata: {name: small}
spec:
  chips: 4
  topology: {requiredLevel: server}
  work: {durationSeconds: 86400}
""", "-n", ns)
        held = wait_until("the job held for power", lambda: (lambda s: s if s.get(
            "reason") == "NoPower" else None)(release.get("trainingjob", "small", "-n", ns)
                                              .get("status") or {}), timeout=180)
        assert held["phase"] == "Pending" and f"budget {name}" in held["message"]
        release.kc("delete", "powerbudget", name)
        wait_until("the job admitted once the budget is gone", lambda: (
            release.get("trainingjob", "small", "-n", ns).get("status") or {}).get("phase")
            in ("Admitted", "Running"), timeout=180)
    finally:
        release.kc("delete", "powerbudget", name, "--ignore-not-found", check=False)
        release.kc("delete", "namespace", ns, "--wait", timeout=300, check=False)


def finish_the_examples(release: Kind) -> None:
    applied = jobs(release)
    assert {j["metadata"]["name"] for j in applied} >= {"finetune-8b", "pretrain-405b", "chat-70b"}

    def started() -> list[dict[str, Any]] | None:
        current = jobs(release)
        ok = all(condition(j, "Admitted") == "True" and (j.get("status") or {}).get("startTime")
                 and (j["status"].get("allocation") or {}).get("chips") for j in current)
        return current if ok else None
    running = wait_until("every example job Admitted with chips and started", started, timeout=300,
                         last=lambda: str([(j["metadata"]["name"], (j.get("status") or {}).get("phase"))
                                           for j in jobs(release)]))
    held_chips(running)
    for kind_name, name in FINISHING:
        # The simulator writes Succeeded; the operator then releases the chips on the record
        # (its next write of the job), so the promise is both, not both in one write.
        def released(kind_name: str = kind_name, name: str = name) -> dict[str, Any] | None:
            body: dict[str, Any] = release.get(kind_name, name, "-n", JOBS_NS)
            status = body.get("status") or {}
            done = status.get("phase") == "Succeeded" and not (status.get("allocation") or {}).get("chips")
            return body if done else None
        done = wait_until(f"{kind_name}/{name} Succeeded with its chips released", released,
                          timeout=300, last=lambda kind_name=kind_name, name=name: str(
                              release.get(kind_name, name, "-n", JOBS_NS).get("status") or {}))
        status = done["status"]
        assert status["admittedTime"] <= status["startTime"] <= status["completionTime"]
        assert status["energyKWh"] > 0
        assert status["reason"] == "Succeeded"


def test_the_rest_api_answers_through_its_service_and_authorizes_each_caller(release: Kind) -> None:
    # A ServiceAccount allowed to manage jobs in JOBS_NS only, and one allowed nothing.
    release.apply(f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: e2e-client, namespace: {JOBS_NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: e2e-nobody, namespace: {JOBS_NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: e2e-jobs, namespace: {JOBS_NS}}}
rules:
  - apiGroups: [ultraplane.dev]
    resources: [trainingjobs, inferencejobs]
    verbs: [get, list, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: e2e-jobs, namespace: {JOBS_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-jobs}}
subjects: [{{kind: ServiceAccount, name: e2e-client, namespace: {JOBS_NS}}}]
""")
    client, nobody = sa_token(release, JOBS_NS, "e2e-client"), sa_token(release, JOBS_NS, "e2e-nobody")
    service = release.kubectl_out("-n", NAMESPACE, "get", "svc", "-l", "app.kubernetes.io/component=api",
                                  "-o", "jsonpath={.items[0].metadata.name}")
    with release.port_forward(NAMESPACE, f"svc/{service}", 80) as base:
        assert http("GET", f"{base}/healthz")[0] == 200
        wait_until("the API ready", lambda: http("GET", f"{base}/readyz")[0] == 200, timeout=120)
        code, body = http("GET", f"{base}/v1/ultraservers", client)
        assert code == 200, body
        job = {"metadata": {"name": "e2e-rest"},
               "spec": {"chips": 4, "work": {"durationSeconds": 31536000}}}
        url = f"{base}/v1/namespaces/{JOBS_NS}/trainingjobs"
        assert http("POST", url, None, job)[0] == 401
        code, body = http("POST", url, nobody, job)
        assert code == 403, body
        code, body = http("POST", url, client, job)
        assert code == 201, body
        other = http("POST", f"{base}/v1/namespaces/{NAMESPACE}/trainingjobs", client, job)
        assert other[0] == 403, other
        # The job is a real custom resource: the operator admits it, the API shows it.
        wait_until("e2e-rest Admitted", lambda: condition(
            release.get("trainingjob", "e2e-rest", "-n", JOBS_NS), "Admitted") == "True", timeout=120)
        code, body = http("GET", f"{url}/e2e-rest", client)
        assert code == 200 and body["status"]["allocation"]["chips"], body
        assert http("GET", f"{url}/e2e-rest", nobody)[0] == 403
        assert http("DELETE", f"{url}/e2e-rest", client)[0] == 200
    wait_until("e2e-rest deleted", lambda: release.kc(
        "get", "trainingjob", "e2e-rest", "-n", JOBS_NS, check=False).returncode != 0, timeout=120)


def churn_manifest(count: int, seconds: int, label: str) -> str:
    docs = []
    for i in range(count):
        docs.append(json.dumps({
            "apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": f"churn-{i:03d}", "labels": {"e2e": label}},
            "spec": {"chips": 8 if i % 3 else 16, "priority": i % 5,
                     "work": {"durationSeconds": seconds}}}))
    return "\n---\n".join(docs)


def leader(kind: Kind) -> str:
    lease = kind.get("lease", "ultraplane-operator", "-n", NAMESPACE)
    holder: str = lease["spec"]["holderIdentity"]
    return holder.rsplit("-", 1)[0]  # <pod name>-<pid>


def test_deleting_the_active_operator_during_a_churn_of_200_jobs_loses_and_double_books_nothing(
        release: Kind) -> None:
    fleet = sorted(ultraservers(release))
    baseline = wait_until("an idle fleet", lambda: idle(release, fleet), timeout=180)
    # 200 jobs, 10 simulated hours each (10 s here): about two waves on 1,152 chips.
    release.apply(churn_manifest(200, 36000, "churn"), "-n", JOBS_NS)
    selector = ("-l", "e2e=churn")
    wait_until("50 churn jobs admitted", lambda: sum(
        condition(j, "Admitted") == "True" or (j.get("status") or {}).get("phase") == "Succeeded"
        for j in jobs(release, *selector)) >= 50, timeout=300, interval=0.5)
    victim = leader(release)
    release.kc("-n", NAMESPACE, "delete", "pod", victim, "--wait=false")
    # Sampled while the standby takes over and the churn goes on: never a chip in two jobs.
    samples = 0

    def finished() -> bool:
        nonlocal samples
        current = jobs(release, *selector)
        held_chips(current)
        samples += 1
        return len(current) == 200 and all((j.get("status") or {}).get("phase") == "Succeeded"
                                           for j in current)
    wait_until("all 200 churn jobs Succeeded", finished, timeout=900, interval=1,
               last=lambda: str(sorted({(j.get("status") or {}).get("phase") or "None"
                                        for j in jobs(release, *selector)})))
    assert samples >= 5
    assert leader(release) != victim
    done = jobs(release, *selector)
    assert all(j["status"].get("startTime") and j["status"].get("completionTime") for j in done)
    release.kc("delete", "-n", JOBS_NS, "trainingjobs", *selector, "--wait", timeout=300)
    wait_until("every chip free after the churn", lambda: idle(release, fleet) == baseline, timeout=180,
               last=lambda: str(free_chips(release, fleet)))


def test_helm_upgrade_with_a_changed_value_keeps_every_job_and_allocation(release: Kind) -> None:
    release.apply(churn_manifest(12, 86400 * 365, "upgrade"), "-n", JOBS_NS)
    selector = ("-l", "e2e=upgrade")

    def allocations() -> dict[str, tuple[str, ...]] | None:
        current = jobs(release, *selector)
        if len(current) != 12 or not all(condition(j, "Admitted") == "True" for j in current):
            return None
        return {j["metadata"]["name"]: tuple(sorted(j["status"]["allocation"]["chips"])) for j in current}
    before = wait_until("12 long jobs admitted", allocations, timeout=180)
    old_pods = {p["metadata"]["uid"] for p in components(release)["operator"]}
    release.helm_run("upgrade", RELEASE, "helm/ultraplane", "--namespace", NAMESPACE, "--reuse-values",
                     "--set", "operator.podGraceSeconds=90", "--wait", "--timeout", "10m", timeout=900)
    wait_until("new operator pods Ready", lambda: (ops := components(release)["operator"])
               and sum(map(ready, ops)) == 2 and not old_pods & {p["metadata"]["uid"] for p in ops},
               timeout=300)
    for pod in components(release)["operator"]:
        if pod["metadata"]["uid"] not in old_pods:
            args = pod["spec"]["containers"][0].get("args", [])
            assert args[args.index("--pod-grace-seconds") + 1] == "90", args
    # Compare once a new pod leads and has run its first admission cycle over the jobs.
    holder = wait_until("a new operator pod holding the lease", lambda: (
        (name := leader(release)) in {p["metadata"]["name"] for p in components(release)["operator"]
                                       if p["metadata"]["uid"] not in old_pods}
        and name), timeout=120)
    wait_until(f"{holder}'s first admission cycle", lambda: "first admission cycle" in release.kubectl_out(
        "-n", NAMESPACE, "logs", holder), timeout=120)
    after = wait_until("the jobs still admitted after the upgrade", allocations, timeout=120)
    assert after == before
    held_chips(jobs(release, *selector))
    release.kc("delete", "-n", JOBS_NS, "trainingjobs", *selector, "--wait", timeout=300)
