"""The operator on a real API server: apply, delete, statuses, events, bad input."""

from __future__ import annotations

from tests.integration.operator_harness import Harness


def test_apply_places_a_gang_and_delete_frees_it(op: Harness) -> None:
    # gen2-a [144]  gen2-b [144]; one 144-chip job must take one whole UltraServer.
    op.ultraserver(f"{op.ns}-a")
    op.ultraserver(f"{op.ns}-b")
    op.start()
    manifest = f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TrainingJob
metadata: {{name: big, namespace: {op.ns}}}
spec:
  chips: 144
  topology: {{requiredLevel: ultraserver}}
  model: {{name: llama}}
  work: {{durationSeconds: 600}}
"""
    op.env.kubectl("apply", "-f", "-", input=manifest)
    body = op.phase("big", "Admitted")
    alloc = body["status"]["allocation"]
    assert len(set(alloc["chips"])) == 144 and len(alloc["ultraServers"]) == 1
    assert len(alloc["servers"]) == 36 and body["status"]["attempt"] == 1
    assert "ultraplane.dev/release-chips" not in (body["metadata"].get("finalizers") or [])
    assert any(c["type"] == "Admitted" and c["status"] == "True"
               for c in body["status"]["conditions"])
    us = alloc["ultraServers"][0]
    op.wait("UltraServer status", lambda: (op.get_ultraserver(us).get("status") or {})
            .get("allocated", {}).get("chips") == 144)
    assert op.get_ultraserver(us)["status"]["jobs"] == [f"tj/{op.ns}/big"]
    events = op.env.kubectl("get", "events", "-n", op.ns, "-o", "name").stdout
    op.wait("an Admitted event", lambda: "big" in op.env.kubectl(
        "get", "events", "-n", op.ns, "--field-selector", "reason=Admitted").stdout) or events

    op.env.kubectl("delete", "trainingjob", "big", "-n", op.ns, "--wait=false")
    op.gone("big")
    op.wait("chips released", lambda: op.get_ultraserver(us)["status"]["allocated"]["chips"] == 0)
    # each log line is written once (kopf's own root handler once doubled every line)
    log = op.log_tail(10_000)
    assert log.count("first admission cycle") == 1, log


def test_queue_positions_and_release_on_succeeded(op: Harness) -> None:
    # gen2-a [144]; three 100-chip jobs: one runs, two wait in priority-then-FIFO order.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("first", 100, priority=9)
    op.phase("first", "Admitted")
    op.job("a", 100, priority=0)
    op.job("b", 100, priority=5)
    op.job("c", 100, priority=0)
    a = op.phase("a", "Pending")
    assert a["status"]["reason"] == "NoCapacity" and a["status"]["message"]
    op.wait("queue positions", lambda: [
        (op.get(n).get("status") or {}).get("queuePosition") for n in ("b", "a", "c")
    ] == [1, 2, 3])
    op.set_status("first", {"phase": "Succeeded"})
    op.phase("b", "Admitted")
    assert op.get("a")["status"]["phase"] == "Pending"
    op.wait("positions move up", lambda: [
        op.get(n)["status"].get("queuePosition") for n in ("a", "c")] == [1, 2])


def test_a_short_job_queues_ahead_of_an_older_long_one(op: Harness) -> None:
    # gen2-a [keep: 84 | first: 60]; 'long' (10 h) then 'short' (10 min), 60 chips each (small
    # enough to rank by run time), wait for first's 60: target start (creation + 10 x run
    # time) puts 'short' first, and it is admitted first.
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("keep", 84)
    op.phase("keep", "Admitted")
    op.job("first", 60)
    op.phase("first", "Admitted")
    op.job("long", 60, work={"durationSeconds": 36_000})
    op.phase("long", "Pending")
    op.job("short", 60, work={"durationSeconds": 600})
    op.wait("short ahead of long", lambda: [
        (op.get(n).get("status") or {}).get("queuePosition") for n in ("short", "long")
    ] == [1, 2])
    op.set_status("first", {"phase": "Succeeded"})
    op.phase("short", "Admitted")
    assert op.get("long")["status"]["phase"] == "Pending"


def test_jobs_that_can_never_fit_fail_with_a_reason(op: Harness) -> None:
    op.ultraserver(f"{op.ns}-a")
    op.start()
    op.job("huge", 1000)
    op.job("nolevel", 4, profile="trn2")  # no Trn2 UltraServer in this fleet
    huge = op.phase("huge", "Failed")
    assert huge["status"]["reason"] == "Unsatisfiable" and huge["status"]["message"]
    bad = op.wait("nolevel decided", lambda: (op.get("nolevel").get("status") or {}).get("phase"))
    assert bad in ("Failed", "Pending")
    assert op.get("nolevel")["status"]["message"]
    op.job("ok", 4)
    op.phase("ok", "Admitted")  # the operator keeps working


def test_a_waiting_whole_ultraserver_gang_reserves_its_ultraserver(op: Harness) -> None:
    # gen2-a [ r0 100 | 44 free ]   gen2-b [ r1 110 | 34 free ]
    # big (144 chips, one UltraServer) waits and reserves gen2-a, the freest; small (30)
    # behind it backfills on gen2-b, and mid (40, fits only gen2-a) waits instead of taking
    # the chips big waits for; when r0 succeeds, gen2-a drains whole and big starts.
    names = [f"{op.ns}-a", f"{op.ns}-b"]
    for name in names:
        op.ultraserver(name)
    op.start()
    op.job("r0", 100, topology={"requiredLevel": "ultraserver"})
    # Either UltraServer may take r0 (a tie); call it a, the other b.
    (a,) = op.phase("r0", "Admitted")["status"]["allocation"]["ultraServers"]
    (b,) = [n for n in names if n != a]
    op.job("r1", 110, topology={"requiredLevel": "ultraserver"})
    assert op.phase("r1", "Admitted")["status"]["allocation"]["ultraServers"] == [b]
    op.job("big", 144, topology={"requiredLevel": "ultraserver"})
    op.wait("big reserves gen2-a", lambda: f"UltraServer {a} reserved for it" in (
        op.get("big").get("status") or {}).get("message", ""))
    big_key = f"tj/{op.ns}/big"
    op.wait("gen2-a shows the reservation", lambda: (
        op.get_ultraserver(a).get("status") or {}).get("reservedFor") == big_key)
    assert "reservedFor" not in op.get_ultraserver(b)["status"]
    row = op.env.kubectl("get", "ultraserver", a, "--no-headers").stdout
    assert big_key in row  # the Reserved printer column
    op.job("small", 30, topology={"requiredLevel": "ultraserver"})
    assert op.phase("small", "Admitted")["status"]["allocation"]["ultraServers"] == [b]
    op.job("mid", 40, topology={"requiredLevel": "ultraserver"})
    assert op.phase("mid", "Pending")["status"]["reason"] == "NoCapacity"
    assert op.get("big")["status"]["phase"] == "Pending"
    op.set_status("r0", {"phase": "Succeeded"})
    assert op.phase("big", "Admitted")["status"]["allocation"]["ultraServers"] == [a]
    op.wait("the reservation cleared once big started", lambda: "reservedFor" not in (
        op.get_ultraserver(a).get("status") or {"reservedFor": 1}))
