"""Acknowledged means durable: concurrent create / delete / re-create of colliding names
against a real `ultraplane serve`, killed with SIGKILL at random points and restarted on
the same store (SQLite and PostgreSQL).

    clients:  POST a  DELETE a  POST a  POST b  DELETE b ...   (8 at once, 6 names)
    server:   ----------------------X kill -9 ---- restart on the same store ----
    check:    every 201 still there unless its 200-delete came; no 200-delete undone;
              no chip held by two running jobs; the fleet views agree with the jobs.

A request cut off by the kill has no answer, so either outcome is allowed for it; every
answered one is held to its answer.
"""

from __future__ import annotations

import importlib.util
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from tests.integration.served import Served, new_postgres_db

_spec = importlib.util.spec_from_file_location("ultraplane_tests_postgres",
                                               Path(__file__).with_name("postgres.py"))
assert _spec and _spec.loader
_pg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pg)
postgres_url = _pg.postgres_url

NS = "durable"
NAMES = [f"n{i}" for i in range(6)]
CHIPS = [1, 8, 36, 72]  # on one 144-chip UltraServer: some run, some queue, some preempt
Op = tuple[str, str, int, int]  # (create|delete, name, chips, priority)


def job_body(name: str, chips: int, priority: int) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"chips": chips, "priority": priority,
                     "work": {"durationSeconds": 10_000_000}}}


class Ledger:
    """What the server acknowledged: the standard every later reading is held to."""

    def __init__(self) -> None:
        self.created: dict[str, str] = {}  # uid -> name, for every 201
        self.deleted: set[str] = set()  # uids of every 200 to a DELETE
        self.maybe_gone: set[str] = set()  # uids an unanswered DELETE may have removed
        self.server_errors: list[str] = []

    def burst(self, base: str, ops: list[Op], kill: threading.Event | None = None) -> None:
        """Send `ops` from 8 threads at once; record each answer (none if cut off)."""
        unanswered_deletes: set[str] = set()

        def send(op: Op) -> None:
            verb, name, chips, priority = op
            url = f"{base}/v1/namespaces/{NS}/trainingjobs"
            try:
                if verb == "create":
                    r = httpx.post(url, json=job_body(name, chips, priority), timeout=30)
                else:
                    r = httpx.delete(f"{url}/{name}", timeout=30)
            except httpx.TransportError:
                if verb == "delete":
                    unanswered_deletes.add(name)
                return
            if r.status_code >= 500:
                self.server_errors.append(f"{verb} {name}: {r.status_code} {r.text}")
                if verb == "delete":
                    unanswered_deletes.add(name)
            elif verb == "create" and r.status_code == 201:
                self.created[r.json()["metadata"]["uid"]] = name
            elif verb == "delete" and r.status_code == 200:
                self.deleted.add(r.json()["metadata"]["uid"])
            else:
                assert r.status_code in (404, 409), (verb, name, r.status_code, r.text)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(send, ops))
        self.maybe_gone |= {uid for uid, name in self.created.items()
                            if name in unanswered_deletes}

    def check(self, base: str) -> None:
        jobs = list_jobs(base)
        present = {j["metadata"]["uid"] for j in jobs}
        lost = set(self.created) - self.deleted - self.maybe_gone - present
        assert not lost, f"acknowledged creates lost: {sorted(self.created[u] for u in lost)}"
        undone = self.deleted & present
        assert not undone, f"acknowledged deletes undone: {sorted(self.created.get(u, u) for u in undone)}"
        by_name = Counter(j["metadata"]["name"] for j in jobs)
        assert all(n == 1 for n in by_name.values()), by_name
        assert not self.server_errors, self.server_errors
        check_chips(base)


def list_jobs(base: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"continue": cont} if cont else {})}
        page = httpx.get(f"{base}/v1/namespaces/{NS}/trainingjobs", params=params,
                         timeout=30).json()
        items += page["items"]
        cont = page["metadata"].get("continue")
        if not cont:
            return items


def check_chips(base: str, timeout_s: float = 15.0) -> None:
    """No chip in two running jobs; the UltraServer views count the running jobs' chips
    (polled: the views are refreshed once per tick, the jobs at once)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        running = [j for j in list_jobs(base) if j["status"].get("phase") == "Running"]
        chips = [c for j in running for c in j["status"]["allocation"]["chips"]]
        doubled = [c for c, n in Counter(chips).items() if n > 1]
        assert not doubled, f"chips double-booked: {doubled[:5]}"
        views = httpx.get(f"{base}/v1/ultraservers", timeout=30).json()["items"]
        shown = {u["name"]: u["allocatedChips"] for u in views}
        held = Counter(c.split("/", 1)[0] for c in chips)
        if all(shown[name] == held.get(name, 0) for name in shown):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the fleet views {shown} disagree with the running jobs {held}")
        time.sleep(0.2)


def machine(db: str, log: Path) -> type[RuleBasedStateMachine]:
    class KilledServer(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.server = Served(db(), log)
            self.server.start()
            self.ledger = Ledger()

        @rule(ops=st.lists(st.tuples(st.sampled_from(["create", "create", "delete"]),
                                     st.sampled_from(NAMES), st.sampled_from(CHIPS),
                                     st.sampled_from([0, 5])), min_size=4, max_size=40),
              kill_after_s=st.none() | st.floats(0.0, 0.4))
        def burst(self, ops: list[Op], kill_after_s: float | None) -> None:
            timer = None
            if kill_after_s is not None:
                timer = threading.Timer(kill_after_s, self.server.kill)
                timer.start()
            self.ledger.burst(self.server.base, ops)
            if timer is not None:
                timer.join()
                self.restart()

        @rule()
        def restart(self) -> None:
            self.server.kill()
            self.server.start()
            self.ledger.check(self.server.base)

        def teardown(self) -> None:
            try:
                if self.server.proc is not None and self.server.proc.poll() is None:
                    self.ledger.check(self.server.base)
            finally:
                self.server.kill()

    return KilledServer


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_acknowledged_writes_survive_kill_9(kind: str, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    runs = iter(range(1000))
    if kind == "sqlite":
        def db() -> str:
            return f"sqlite:///{tmp_path / f'store-{next(runs)}.db'}"
    else:
        base = request.getfixturevalue("postgres_url")

        def db() -> str:
            return new_postgres_db(base, "dur")
    log = tmp_path / "serve.log"
    run_state_machine_as_test(machine(db, log), settings=settings(
        max_examples=3, stateful_step_count=5, deadline=None,
        # no shrinking: every step starts real processes; the failing steps are printed
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck)))
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") - 200:][:3000]


def test_a_deleted_job_leaves_the_store_and_old_tombstones_are_never_requeued(
        tmp_path: Path) -> None:
    from fastapi.testclient import TestClient
    from sqlmodel import Session
    from ultraplane.api import store
    from ultraplane.api.app import create_app
    from ultraplane.api.settings import Settings

    settings = Settings(db=f"sqlite:///{tmp_path / 'tomb.db'}", demo=False, tick_seconds=3600,
                        fleet="trn3-gen2:1")
    app = create_app(settings)
    url = f"/v1/namespaces/{NS}/trainingjobs"
    with TestClient(app) as client:
        for name in ("gone", "old"):
            assert client.post(url, json=job_body(name, 8, 0)).status_code == 201
        app.state.backend.tick()
        assert client.delete(f"{url}/gone").status_code == 200
    engine = store.make_engine(settings.db)
    with Session(engine) as session:
        rows = {row.name: row for row in store.list_jobs(session)}
        assert set(rows) == {"old"}  # the deleted job's row went with the 200
        old = rows["old"]  # made a tombstone, as versions that wrote phase Deleted left them
        old.status = {**old.status, "status": {**old.status["status"], "phase": "Deleted"}}
        store.save_job(session, job=old)
    engine.dispose()
    app = create_app(settings)
    with TestClient(app) as client:
        app.state.backend.tick()
        assert client.get(url).json()["items"] == []
        views = client.get("/v1/ultraservers").json()["items"]
        assert sum(u["allocatedChips"] for u in views) == 0
    engine = store.make_engine(settings.db)
    with Session(engine) as session:
        assert list(store.list_jobs(session)) == []
    engine.dispose()
