"""State survives a restart: in-process (SQLite and PostgreSQL) and with a real `ultraplane serve`.

    gen2-0000 [job "llm": 72 chips, running]   gen2-0001 .. gen2-0007 [free]
        -- stop the API --  -- start it again on the same store --
    gen2-0000 [job "llm": same 72 chips, running from its last checkpoint]
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

_spec = importlib.util.spec_from_file_location("ultraplane_tests_postgres", Path(__file__).with_name("postgres.py"))
assert _spec and _spec.loader
_pg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pg)
postgres_url = _pg.postgres_url

NS = "team-a"
JOB = {"metadata": {"name": "llm"},
       "spec": {"chips": 72, "topology": {"requiredLevel": "ultraserver"},
                "work": {"durationSeconds": 36_000}, "checkpointIntervalSeconds": 600}}


def _db_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'restart.db'}"
    import psycopg

    base = request.getfixturevalue("postgres_url")
    name = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_restart_readopts_running_job_on_its_chips(kind: str, tmp_path: Path,
                                                   request: pytest.FixtureRequest) -> None:
    now = [1_767_225_600.0]
    settings = Settings(db=_db_url(kind, tmp_path, request), demo=False, tick_seconds=3600)
    app = create_app(settings, clock=lambda: now[0], background_ticks=False)
    with TestClient(app) as client:
        assert client.post(f"/v1/namespaces/{NS}/trainingjobs", json=JOB).status_code == 201
        app.state.backend.tick()
        now[0] += 30  # 30 simulated minutes
        app.state.backend.tick()
        before = client.get(f"/v1/namespaces/{NS}/trainingjobs/llm").json()["status"]
        hours_before = client.get("/v1/accounting/jobs").json()[0]["chipHours"]
    assert before["phase"] == "Running" and before["progress"]["checkpointedSteps"] > 0

    now[0] += 5  # the API was down for 5 wall seconds
    app2 = create_app(settings, clock=lambda: now[0], background_ticks=False)
    with TestClient(app2) as client:
        after = client.get(f"/v1/namespaces/{NS}/trainingjobs/llm").json()["status"]
        assert after["phase"] == "Running"
        assert after["allocation"]["chips"] == before["allocation"]["chips"]
        # Resumed from its checkpoint, not from zero.
        assert after["progress"]["completedSteps"] >= before["progress"]["checkpointedSteps"] > 0
        used = {u["name"]: u["allocatedChips"] for u in client.get("/v1/ultraservers").json()["items"]}
        assert sum(used.values()) == 72
        now[0] += 10
        app2.state.backend.tick()
        app2.state.backend.persist(force=True)
        [record] = client.get("/v1/accounting/jobs").json()
        assert record["chipHours"] > hours_before
        # The simulated clock continued: the job's day is still the first simulated day.
        assert [d["day"] for d in client.get("/v1/accounting/days").json()] == ["2026-01-01"]


# --- a real server ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(db: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(port), "--db", db,
           "--no-demo", "--time-scale", "600", "--tick-seconds", "0.2"]
    env = {**os.environ, "ULTRAPLANE_ACCOUNTING_INTERVAL_SECONDS": "0.5"}
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env)


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"serve did not become ready:\n{log.read_text()}")


def _poll(fn: Any, what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_real_server_restart_keeps_jobs_and_accounting(tmp_path: Path) -> None:
    db, port, log = f"sqlite:///{tmp_path / 'serve.db'}", _free_port(), tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    proc = _serve(db, port, log)
    try:
        _wait_ready(base, proc, log)
        assert f"on {base}" in log.read_text() and f"{base}/docs" in log.read_text()
        r = httpx.post(f"{base}/v1/namespaces/{NS}/trainingjobs", json=JOB, timeout=10)
        assert r.status_code == 201, r.text
        url = f"{base}/v1/namespaces/{NS}/trainingjobs/llm"
        before = _poll(lambda: (s := httpx.get(url).json()["status"]).get("progress", {})
                       .get("checkpointedSteps") and s, "a checkpoint")
        hours = _poll(lambda: httpx.get(f"{base}/v1/accounting/jobs").json()[0]["chipHours"],
                      "accounting to be written")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal (exit -15).
    assert proc.returncode in (0, -signal.SIGTERM), log.read_text()

    proc = _serve(db, port, log)
    try:
        _wait_ready(base, proc, log)
        after = httpx.get(url).json()["status"]
        assert after["phase"] == "Running"
        assert after["allocation"]["chips"] == before["allocation"]["chips"]
        assert after["progress"]["completedSteps"] >= before["progress"]["checkpointedSteps"]
        assert httpx.get(f"{base}/v1/accounting/jobs").json()[0]["chipHours"] >= hours
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
