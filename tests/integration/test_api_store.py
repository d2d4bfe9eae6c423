"""The accounting store on SQLite and on a real PostgreSQL server, through the same CRUD.

Each store test runs twice: `sqlite` (a temp file) and `postgres` (a throwaway
server from tests/integration/postgres.py, marked `postgres`).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, inspect
from sqlmodel import Session
from ultraplane.api import store
from ultraplane.api.store.accounting import split_by_day, usage_of
from ultraplane.api.store.tables import Job

_spec = importlib.util.spec_from_file_location("ultraplane_tests_postgres", Path(__file__).with_name("postgres.py"))
assert _spec and _spec.loader
_pg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pg)
postgres_url = _pg.postgres_url  # registers the session fixture in this module

DAY0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        base = request.getfixturevalue("postgres_url")
        # One database per test so tests stay independent on one server.
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        dsn = base.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = base.rsplit("/", 1)[0] + f"/{name}"
    eng = store.make_engine(url)
    store.migrate(eng)
    yield eng
    eng.dispose()


def _record(session: Session, uid: str, ns: str, start: float, end: float | None, now: float,
            chips: int = 8, energy: float = 10.0) -> None:
    record, days = usage_of(job_uid=uid, kind="TrainingJob", namespace=ns, name=uid, chips=chips,
                            phase="Succeeded" if end else "Running", submitted_s=start - 60,
                            started_s=start, finished_s=end, now_s=now, energy_kwh=energy)
    store.upsert_accounting(session, record=record, days=days)


def test_migrations_are_idempotent_and_create_the_tables(engine: Engine) -> None:
    store.migrate(engine)  # second run on startup is a no-op
    tables = set(inspect(engine).get_table_names())
    assert {"jobs", "accounting", "daily_usage", "kv", "alembic_version"} <= tables


def test_job_rows_round_trip(engine: Engine) -> None:
    with Session(engine) as s:
        store.save_job(s, job=Job(uid="u1", kind="TrainingJob", namespace="a", name="j", seq=2,
                                  spec={"chips": 4}, status={"status": {"phase": "Running"}},
                                  allocated_chips=["gen2-0000/s00/c00"]))
        store.save_job(s, job=Job(uid="u0", kind="InferenceJob", namespace="a", name="k", seq=1))
    with Session(engine) as s:
        assert [j.uid for j in store.list_jobs(s)] == ["u0", "u1"]
        job = store.get_job(s, uid="u1")
        assert job is not None and job.allocated_chips == ["gen2-0000/s00/c00"]
        assert job.status["status"]["phase"] == "Running"
        assert store.delete_job(s, uid="u1") and not store.delete_job(s, uid="u1")


def test_accounting_upsert_is_absolute_and_aggregates(engine: Engine) -> None:
    with Session(engine) as s:
        _record(s, "j1", "a", DAY0 + 3600, None, now=DAY0 + 7200)  # running, 1 h so far
        _record(s, "j1", "a", DAY0 + 3600, DAY0 + 3 * 3600, now=DAY0 + 3 * 3600)  # finished, 2 h
        _record(s, "j1", "a", DAY0 + 3600, DAY0 + 3 * 3600, now=DAY0 + 3 * 3600)  # replayed
        _record(s, "j2", "b", DAY0 + 23 * 3600, DAY0 + 25 * 3600, now=DAY0 + 25 * 3600, chips=4)
    with Session(engine) as s:
        rows = {r.job_uid: r for r in store.list_accounting(s)}
        assert rows["j1"].chip_hours == pytest.approx(16.0)  # 8 chips x 2 h, not 3x
        assert rows["j1"].completion_time_s == pytest.approx(2 * 3600 + 60)
        by_ns = {u.namespace: u for u in store.usage_by_namespace(s)}
        assert by_ns["a"].jobs == 1 and by_ns["a"].finished_jobs == 1
        assert by_ns["b"].chip_hours == pytest.approx(8.0)
        days = {d.day: d for d in store.usage_by_day(s)}
        assert days["2026-01-01"].chip_hours == pytest.approx(16.0 + 4.0)
        assert days["2026-01-02"].chip_hours == pytest.approx(4.0)
        assert days["2026-01-01"].jobs == 2
        only_b = store.usage_by_day(s, namespace="b", since="2026-01-02")
        assert [(d.day, d.chip_hours) for d in only_b] == [("2026-01-02", pytest.approx(4.0))]
        assert [r.name for r in store.list_accounting(s, namespace="b")] == ["j2"]


def test_values_survive_a_new_engine(engine: Engine) -> None:
    with Session(engine) as s:
        store.set_value(s, key="sim_elapsed_s", value="12.5")
        store.set_value(s, key="sim_elapsed_s", value="99.0")
    fresh = store.make_engine(engine.url.render_as_string(hide_password=False))
    with Session(fresh) as s:
        assert store.get_value(s, key="sim_elapsed_s") == "99.0"
        assert store.get_value(s, key="missing") is None
    fresh.dispose()


@settings(max_examples=200, deadline=None)
@given(start=st.floats(DAY0, DAY0 + 10 * 86_400), span=st.floats(0.001, 5 * 86_400),
       chips=st.integers(1, 1152), energy=st.floats(0, 1e6))
def test_split_by_day_conserves_chip_hours_and_energy(start: float, span: float, chips: int,
                                                      energy: float) -> None:
    end = start + span
    days = split_by_day(start, end, chips=chips, energy_kwh=energy)
    assert sum(h for h, _ in days.values()) == pytest.approx(chips * (end - start) / 3600, rel=1e-9)
    assert sum(e for _, e in days.values()) == pytest.approx(energy, rel=1e-9, abs=1e-9)
    assert len(days) <= int(span // 86_400) + 2
    assert list(days) == sorted(days)


def test_postgres_url_is_mapped_to_psycopg3() -> None:
    assert store.normalize_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store.normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store.normalize_url("sqlite:///x.db") == "sqlite:///x.db"
