"""A real `ultraplane serve` process for tests that kill it: start, wait ready, kill -9, restart.

The durability tests need what users have, a separate process whose death loses
everything not committed, so they drive `python -m ultraplane.cli serve` over
HTTP. Every start appends to one log, so a test can assert that no run of the
server printed a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from tests.integration.kube_tier import free_port

READY_TIMEOUT_S = 90.0


def new_postgres_db(base_url: str, prefix: str = "d") -> str:
    """A fresh database on the test server: each run's store starts empty."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    dsn = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base_url.rsplit("/", 1)[0] + f"/{name}"


class Served:
    """One store, served by a succession of processes (one at a time)."""

    def __init__(self, db: str, log: Path, *, fleet: str = "trn3-gen2:1",
                 args: tuple[str, ...] = ()) -> None:
        self.db = db
        self.log = log
        self.fleet = fleet
        self.args = args
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(self.port),
                "--db", self.db, "--fleet", self.fleet, "--no-demo", "--tick-seconds", "0.2",
                *self.args]

    def start(self) -> None:
        """Start a server and wait for /readyz; raises with the log if it does not come up."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}\n".encode())
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         env=env)
        self.starts += 1
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n"
                                     f"{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve did not become ready:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """kill -9: nothing runs after it, no shutdown handler, no last persist."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback")
