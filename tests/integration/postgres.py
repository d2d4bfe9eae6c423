"""A throwaway PostgreSQL server for the store tests (a session fixture).

Uses `ULTRAPLANE_TEST_POSTGRES_URL` when set; otherwise starts the Debian
server binaries (`/usr/lib/postgresql/*/bin/initdb` + `pg_ctl`) on a free
loopback port in a temp dir. initdb refuses to run as root, so as root the
server runs as the `postgres` user (created by the Debian package) via
`runuser`. Where the binaries are missing the tests skip with the reason, and
fail instead when `ULTRAPLANE_REQUIRE_POSTGRES=1` (CI installs `postgresql`).

Import the fixture into a test module with `postgres_url = load_fixture()`
style (see test_api_store.py): pytest runs with --import-mode=importlib.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRE = "ULTRAPLANE_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    # Same truthiness as tests/conftest.py's require_or_skip.
    if os.environ.get(REQUIRE, "").strip().lower() in {"1", "true", "yes", "on"}:
        pytest.fail(f"{reason} ({REQUIRE}=1, so this is a failure, not a skip)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _as_user(cmd: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL of an empty PostgreSQL database, for the whole session."""
    external = os.environ.get("ULTRAPLANE_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    bindir = _bin_dir()
    if bindir is None:
        _unavailable("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin; "
                     "apt-get install postgresql)")
        return
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no 'postgres' user for initdb")
            return
        if shutil.which("runuser") is None:
            _unavailable("running as root and runuser is missing")
            return
        user = "postgres"
    tmp = Path(tempfile.mkdtemp(prefix="ultraplane-pg-"))
    data, sock = tmp / "data", tmp / "sock"
    sock.mkdir()
    if user:
        shutil.chown(tmp, user)
        shutil.chown(sock, user)
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    try:
        subprocess.run(_as_user([str(bindir / "initdb"), "-D", str(data), "-U", "ultraplane",
                                 "--auth=trust", "-E", "UTF8", "--no-sync"], user), **run)  # type: ignore[call-overload]
        opts = f"-h 127.0.0.1 -p {port} -k {sock} -F -c fsync=off -c full_page_writes=off"
        subprocess.run(_as_user([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
                                 "-t", "60", "-l", str(tmp / "log"), "start"], user), **run)  # type: ignore[call-overload]
    except subprocess.CalledProcessError as exc:
        log = (tmp / "log").read_text() if (tmp / "log").exists() else ""
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL: {exc.stderr or exc.stdout}\n{log}")
    url = f"postgresql+psycopg://ultraplane@127.0.0.1:{port}/postgres"
    _wait(url)
    try:
        yield url
    finally:
        subprocess.run(_as_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                 "stop"], user), capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def _wait(url: str, timeout_s: float = 30.0) -> None:
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
