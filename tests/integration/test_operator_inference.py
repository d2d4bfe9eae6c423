"""InferenceJob admission by the operator on a real API server: replicas placed whole, each
inside its required level, released on delete; a TrainingJob of the same name is separate."""

from __future__ import annotations

from typing import Any

from tests.integration.operator_harness import GROUP, VERSION, Harness

INFERENCE = "inferencejobs"


def get_inference(op: Harness, name: str) -> dict[str, Any]:
    return dict(op.api.get_namespaced_custom_object(GROUP, VERSION, op.ns, INFERENCE, name))


def inference_phase(op: Harness, name: str, phase: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body = get_inference(op, name)
        return body if (body.get("status") or {}).get("phase") == phase else None

    return dict(op.wait(f"InferenceJob {name} to be {phase}", check))


def apply_serve(op: Harness, *, chips_per_replica: int) -> None:
    """`kubectl apply` InferenceJob serve: 2 replicas, each inside one UltraServer."""
    manifest = f"""
apiVersion: ultraplane.dev/v1alpha1
kind: InferenceJob
metadata: {{name: serve, namespace: {op.ns}}}
spec:
  replicas: 2
  chipsPerReplica: {chips_per_replica}
  topology: {{requiredLevel: ultraserver}}
  model: {{name: llama}}
  load: {{requestsPerSecond: 50}}
"""
    op.env.kubectl("apply", "-f", "-", input=manifest)


def allocated(op: Harness, us: str) -> int:
    return int(((op.get_ultraserver(us).get("status") or {}).get("allocated") or {})
               .get("chips", -1))


def test_inference_replicas_are_admitted_whole_and_freed_on_delete(op: Harness) -> None:
    # gen2-a [144]  gen2-b [144]; serve: 2 replicas x 100 chips, each in one UltraServer, so
    # one replica per UltraServer.
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    op.start()
    apply_serve(op, chips_per_replica=100)
    body = inference_phase(op, "serve", "Admitted")
    status = body["status"]
    replicas = status["allocation"]["replicas"]
    assert [r["index"] for r in replicas] == [0, 1]
    for r in replicas:
        assert len(set(r["chips"])) == 100 and len(r["ultraServers"]) == 1
        assert {c.split("/", 1)[0] for c in r["chips"]} == set(r["ultraServers"])
    assert set(replicas[0]["chips"]).isdisjoint(replicas[1]["chips"])
    assert len(set(status["allocation"]["chips"])) == 200
    assert sorted(status["allocation"]["ultraServers"]) == [f"{op.ns}-a", f"{op.ns}-b"]
    assert status["attempt"] == 1
    assert "ultraplane.dev/release-chips" not in (body["metadata"].get("finalizers") or [])
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in status["conditions"])
    for us in (f"{op.ns}-a", f"{op.ns}-b"):
        op.wait(f"{us} status counts the replica", lambda us=us: allocated(op, us) == 100)
        us_status = op.get_ultraserver(us)["status"]
        assert us_status["free"]["chips"] == 44 and us_status["jobs"] == [f"ij/{op.ns}/serve"]
    op.wait("an Admitted event", lambda: "serve" in op.env.kubectl(
        "get", "events", "-n", op.ns, "--field-selector", "reason=Admitted").stdout)

    op.env.kubectl("delete", "inferencejob", "serve", "-n", op.ns, "--wait=false")
    op.wait("InferenceJob deleted", lambda: "serve" not in op.env.kubectl(
        "get", "inferencejobs", "-n", op.ns, "-o", "name").stdout)
    for us in (f"{op.ns}-a", f"{op.ns}-b"):
        op.wait(f"{us} chips free", lambda us=us: allocated(op, us) == 0)
        assert op.get_ultraserver(us)["status"]["free"]["chips"] == 144


def test_a_training_and_an_inference_job_of_one_name_both_run_and_restart_safely(
        op: Harness) -> None:
    # gen2-a [144]: TrainingJob "same" (40) and InferenceJob "same" (2 x 16); kill -9 and
    # restart: both keep their chips; the UltraServer counts 72 chips of two jobs.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("same", 40, topology={"requiredLevel": "ultraserver"})
    op.api.create_namespaced_custom_object(GROUP, VERSION, op.ns, INFERENCE, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceJob",
        "metadata": {"name": "same", "namespace": op.ns},
        "spec": {"replicas": 2, "chipsPerReplica": 16, "model": {"name": "llama"},
                 "load": {"tokensPerSecond": 1000}}})
    train = set(op.phase("same", "Admitted")["status"]["allocation"]["chips"])
    serve = inference_phase(op, "same", "Admitted")["status"]["allocation"]
    assert len(train) == 40 and len(set(serve["chips"])) == 32
    assert train.isdisjoint(serve["chips"])
    op.wait("72 chips allocated", lambda: allocated(op, f"{op.ns}-a") == 72)
    assert op.get_ultraserver(f"{op.ns}-a")["status"]["jobs"] == [
        f"ij/{op.ns}/same", f"tj/{op.ns}/same"]
    op.kill9()
    op.start()
    op.job("late", 72, topology={"requiredLevel": "ultraserver"})
    assert op.phase("late", "Admitted")["status"]["attempt"] == 1
    again = get_inference(op, "same")["status"]
    assert again["attempt"] == 1 and again["allocation"]["replicas"] == serve["replicas"]
    assert set(op.get("same")["status"]["allocation"]["chips"]) == train
    late = set(op.get("late")["status"]["allocation"]["chips"])
    assert late.isdisjoint(train) and late.isdisjoint(serve["chips"])
    op.wait("144 chips allocated", lambda: allocated(op, f"{op.ns}-a") == 144)


def test_a_failed_chip_replaces_only_the_replica_on_it(op: Harness) -> None:
    # gen2-a: serve (2 x 16); one chip of replica 1 fails; replica 0 keeps its chips.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.api.create_namespaced_custom_object(GROUP, VERSION, op.ns, INFERENCE, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceJob",
        "metadata": {"name": "serve", "namespace": op.ns},
        "spec": {"replicas": 2, "chipsPerReplica": 16, "model": {"name": "llama"},
                 "load": {"requestsPerSecond": 5}}})
    before = inference_phase(op, "serve", "Admitted")["status"]["allocation"]["replicas"]
    victim = sorted(before[1]["chips"])[0]
    op.patch_ultraserver(f"{op.ns}-a", {"failedChips": [victim.split("/", 1)[1]]})

    def replaced() -> dict[str, Any] | None:
        status = get_inference(op, "serve")["status"]
        return status if status.get("attempt") == 2 and status["phase"] == "Admitted" else None

    status = op.wait("the replica replaced", replaced)
    after = status["allocation"]["replicas"]
    assert status["reason"] == "ChipReplaced" and status["restarts"] == 1
    assert after[0]["chips"] == before[0]["chips"]
    assert victim not in after[1]["chips"] and len(set(after[1]["chips"])) == 16
    assert victim not in status["allocation"]["chips"]


def test_whole_ultraserver_replicas_reserve_one_ultraserver_each(op: Harness) -> None:
    # Three UltraServers holding 100, 100 and 110 chips (44, 44 and 34 free). serve (2
    # replicas x 144) waits and reserves the two with 44 free; a 40-chip job behind it waits
    # too (it would fit only there); when their jobs succeed, serve starts on exactly those.
    names = [f"{op.ns}-{x}" for x in "abc"]
    for n in names:
        op.ultraserver(n)
    op.start()
    on: dict[str, str] = {}  # UltraServer -> the job on it (the operator picks which)
    for i, chips in enumerate((100, 100, 110)):
        op.job(f"r{i}", chips, topology={"requiredLevel": "ultraserver"})
        (us,) = op.phase(f"r{i}", "Admitted")["status"]["allocation"]["ultraServers"]
        on[us] = f"r{i}"
    assert sorted(on) == names
    apply_serve(op, chips_per_replica=144)
    key = f"ij/{op.ns}/serve"

    def reserved() -> list[str] | None:
        # each UltraServer's view is its own write: wait for both, not the first that lands
        held = sorted(n for n in names
                      if (op.get_ultraserver(n).get("status") or {}).get("reservedFor") == key)
        return held if len(held) == 2 else None

    held = op.wait("serve's reservation on two UltraServers", reserved)
    assert "reserved for it" in inference_phase(op, "serve", "Pending")["status"]["message"]
    op.job("mid", 40, topology={"requiredLevel": "ultraserver"})
    assert op.phase("mid", "Pending")["status"]["reason"] == "NoCapacity"
    assert sorted(us for us, j in on.items() if j != "r2") == held
    for us in held:
        op.set_status(on[us], {"phase": "Succeeded"})
    body = inference_phase(op, "serve", "Admitted")
    assert sorted(body["status"]["allocation"]["ultraServers"]) == held
