"""A broken store stops `ultraplane serve` with one sentence, or answers 503; never a traceback.

    start-up:  truncated | random bytes | corrupt mid-file | read-only | full | held by
               another live server  ->  exit 2, "--db: ... <the file> ...", no traceback
    run time:  the store refuses writes  ->  POST / DELETE answer 503 + Retry-After, and
               the job is exactly as before (absent after a failed create, present and
               running after a failed delete); once the store takes writes again, both work
    URLs:      a `%40` in a password is an `@`; no error or log shows the password
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError
from ultraplane.api import store
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings
from ultraplane.api.store.claims import masked

from tests.integration.served import Served, free_port, new_postgres_db
from ultraplane.cli import main

_spec = importlib.util.spec_from_file_location("ultraplane_tests_postgres",
                                               Path(__file__).with_name("postgres.py"))
assert _spec and _spec.loader
_pg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pg)
postgres_url = _pg.postgres_url

NS = "team-a"


def job(name: str, chips: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"chips": chips, "work": {"durationSeconds": 10_000_000}}}


def filled_store(path: Path, jobs: int = 150) -> None:
    """A real store with enough rows that damage in mid-file hits row pages."""
    app = create_app(Settings(db=f"sqlite:///{path}", demo=False))
    with TestClient(app) as client:
        for i in range(jobs):
            assert client.post(f"/v1/namespaces/{NS}/trainingjobs",
                               json=job(f"j{i:03d}", 1)).status_code == 201


def serve_exit(db: str) -> tuple[int, str]:
    """`ultraplane serve` in a real process (its start-up must end before serving)."""
    cmd = [sys.executable, "-m", "ultraplane.cli", "serve", "--db", db, "--no-demo",
           "--port", str(free_port())]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def one_sentence(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def _truncate(p: Path) -> None:
    with p.open("r+b") as f:
        f.truncate(p.stat().st_size // 2)


def _random(p: Path) -> None:
    p.write_bytes(os.urandom(p.stat().st_size))


def _mid_file(p: Path) -> None:
    with p.open("r+b") as f:
        f.seek(p.stat().st_size // 2)
        f.write(os.urandom(16_384))


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    good = tmp_path_factory.mktemp("good") / "good.db"
    filled_store(good)
    return good


@pytest.mark.parametrize("damage", [_truncate, _random, _mid_file],
                         ids=["truncated", "random-bytes", "corrupt-mid-file"])
def test_a_damaged_store_is_one_sentence_and_exit_2(damage: Callable[[Path], None],
                                                    good_store: Path, tmp_path: Path) -> None:
    good = good_store
    bad = tmp_path / "bad.db"
    shutil.copy(good, bad)
    damage(bad)
    code, output = serve_exit(f"sqlite:///{bad}")
    assert code == 2, output
    sentence = one_sentence(output)
    assert sentence.startswith("Error: --db:") and str(bad) in sentence, sentence


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """A folder that is a mount of its own (tmpfs, or a bind mount), unmounted after."""
    done: list[Path] = []

    def mount(*args: str) -> Path:
        target = tmp_path / f"mnt{len(done)}"
        target.mkdir()
        result = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount here (needs root): {result.stderr.strip()}")
        done.append(target)
        return target

    yield mount
    for target in reversed(done):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_a_read_only_store_is_one_sentence_and_exit_2(tmp_path: Path,
                                                      mounted: Callable[..., Path]) -> None:
    source = tmp_path / "src"
    source.mkdir()
    filled_store(source / "ro.db", jobs=3)
    folder = mounted("--bind", "-o", "ro", str(source))
    code, output = serve_exit(f"sqlite:///{folder / 'ro.db'}")
    assert code == 2, output
    assert str(folder / "ro.db") in one_sentence(output)


def test_a_full_disk_is_one_sentence_and_exit_2(mounted: Callable[..., Path]) -> None:
    folder = mounted("-t", "tmpfs", "-o", "size=256k", "tmpfs")
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill it to the last byte
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    code, output = serve_exit(f"sqlite:///{folder / 'full.db'}")
    assert code == 2, output
    assert str(folder / "full.db") in one_sentence(output)


def _db(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return new_postgres_db(request.getfixturevalue("postgres_url"), "sf")


KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_serve_on_a_held_store_is_refused(kind: str, tmp_path: Path,
                                                   request: pytest.FixtureRequest) -> None:
    db = _db(kind, tmp_path, request)
    first = Served(db, tmp_path / "first.log")
    first.start()
    try:
        code, output = serve_exit(db)
        assert code == 2, output
        assert "in use by another ultraplane serve" in one_sentence(output)
        first.kill()  # kill -9 lets the claim go with the process
        second = Served(db, tmp_path / "second.log")
        second.start()
        second.stop()
    finally:
        first.kill()


def _refuse_writes(engine: Engine) -> Callable[[], None]:
    """Make the store refuse every write from now on (as a read-only or full store does),
    through the database's own read-only switch; returns the undo."""
    def read_only(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("PRAGMA query_only=ON")
        else:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            dbapi_connection.commit()
        cursor.close()

    # Engine.dispose, not Pool.dispose: a connection the background tick has checked out
    # belongs to the replaced pool and is never handed out again, so no writable connection
    # outlives the switch and no read-only one outlives the undo.
    event.listen(engine, "connect", read_only)
    engine.dispose()  # every later connection is a new one, read-only

    def undo() -> None:
        event.remove(engine, "connect", read_only)
        engine.dispose()

    return undo


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_commit_is_503_and_changes_nothing(kind: str, tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    settings = Settings(db=_db(kind, tmp_path, request), demo=False, tick_seconds=3600,
                        fleet="trn3-gen2:1")
    app = create_app(settings)
    base = f"/v1/namespaces/{NS}/trainingjobs"
    with TestClient(app) as client:
        assert client.post(base, json=job("kept")).status_code == 201
        app.state.backend.tick()
        assert client.get(f"{base}/kept").json()["status"]["phase"] == "Running"
        undo = _refuse_writes(app.state.engine)

        refused = client.post(base, json=job("lost"))
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"].isdigit()
        assert refused.json()["error"] == "StoreUnavailable" and refused.json()["message"]
        assert client.get(f"{base}/lost").status_code == 404
        assert [j["metadata"]["name"] for j in client.get(base).json()["items"]] == ["kept"]

        refused = client.delete(f"{base}/kept")
        assert refused.status_code == 503, refused.text
        with pytest.raises(SQLAlchemyError):  # the tick cannot save either; it keeps its changes
            app.state.backend.tick()
        after = client.get(f"{base}/kept").json()
        assert after["status"]["phase"] == "Running"
        views = client.get("/v1/ultraservers").json()["items"]
        assert sum(u["allocatedChips"] for u in views) == 8

        undo()
        assert client.post(base, json=job("lost")).status_code == 201
        assert client.delete(f"{base}/kept").status_code == 200
        app.state.backend.tick()
    # what was acknowledged is what a new server finds
    with TestClient(create_app(settings)) as client:
        assert [j["metadata"]["name"] for j in client.get(base).json()["items"]] == ["lost"]


def test_an_escaped_password_is_a_password_and_never_shown(tmp_path: Path) -> None:
    url = "postgresql://ultraplane:s3cr%40t%2Fpw@127.0.0.1:1/x"
    assert store.make_engine(url).url.password == "s3cr@t/pw"
    assert "s3cr" not in masked(url) and "s3cr" not in masked("postgresql://u:s3cr@t@h:x/db")
    result = CliRunner().invoke(main, ["serve", "--db", url, "--no-demo"])
    assert result.exit_code == 2, result.output
    assert "s3cr" not in result.output and "--db" in one_sentence(result.output)


@pytest.mark.postgres
def test_an_escaped_password_connects(tmp_path: Path, postgres_url: str) -> None:
    db = new_postgres_db(postgres_url, "pw")
    user, rest = db.split("://", 1)[1].split("@", 1)
    import psycopg

    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER ROLE ultraplane PASSWORD 'p@ss/w:rd'")
    served = Served(f"postgresql://{user}:p%40ss%2Fw%3Ard@{rest}", tmp_path / "pw.log")
    served.start()
    served.stop()
    assert "p@ss" not in served.log.read_text() and "p%40ss" not in served.log.read_text()


@pytest.mark.parametrize("where", ["folder", "device"])
def test_a_store_that_is_no_file_is_one_sentence(where: str, tmp_path: Path) -> None:
    path = tmp_path if where == "folder" else Path("/dev/null")
    result = CliRunner().invoke(main, ["serve", "--db", f"sqlite:///{path}", "--no-demo"])
    assert result.exit_code == 2, result.output
    assert str(path) in one_sentence(result.output)
    assert not (path.parent / f"{path.name}.lock").exists()  # nothing written beside it


def test_a_store_from_a_newer_version_is_one_sentence(tmp_path: Path) -> None:
    from sqlalchemy import text

    path = tmp_path / "newer.db"
    engine = store.make_engine(f"sqlite:///{path}")
    store.migrate(engine)
    with engine.begin() as conn:  # a schema revision this version has never heard of
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    result = CliRunner().invoke(main, ["serve", "--db", f"sqlite:///{path}", "--no-demo"])
    assert result.exit_code == 2, result.output
    sentence = one_sentence(result.output)
    assert str(path) in sentence and "9999" in sentence


def test_a_store_that_fails_a_read_is_503_not_500(tmp_path: Path) -> None:
    from sqlalchemy import text

    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'r.db'}", demo=False,
                              tick_seconds=3600))
    with TestClient(app) as client:
        assert client.get("/v1/accounting/jobs").status_code == 200
        with app.state.engine.begin() as conn:  # damaged under the running server
            conn.execute(text("DROP TABLE daily_usage"))
            conn.execute(text("DROP TABLE accounting"))
        r = client.get("/v1/accounting/jobs")
        assert r.status_code == 503 and r.headers["Retry-After"].isdigit(), r.text
        assert "could not be read" in r.json()["message"] and "SELECT" not in r.text
