"""The SQL store: engine factory, migrations on startup, keyword-only CRUD.

SQLite is the default so `ultraplane serve` needs nothing installed;
PostgreSQL is chosen by URL. No module-level engine: each app builds its own,
so tests can run several stores side by side.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, Table, delete, event, func, insert
from sqlalchemy import select as sa_select
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlmodel import Session, SQLModel, col, create_engine, select
from ultraplane.api.store.claims import (
    StoreError,
    describe,
    failed,
    masked,
    parse_url,
    reason,
    sqlite_file,
)
from ultraplane.api.store.tables import (
    AccountingCreate,
    AccountingRecord,
    DailyUsage,
    DayUsage,
    Job,
    KeyValue,
    NamespaceUsage,
    QueueUsage,
)

MIGRATIONS = Path(__file__).with_name("migrations")


def normalize_url(url: str) -> str:
    """Map plain `postgresql://` URLs to the psycopg 3 driver that is installed.

    Parsed as a URL (sqlalchemy's make_url), so an escaped password (`%40`) stays one.
    """
    parsed = parse_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str) -> Engine:
    """Build an engine; SQLite gets WAL, a busy timeout and synchronous commits.

    `synchronous=FULL`: a commit is on disk before the API acknowledges it (NORMAL
    survives `kill -9` but may lose the last commits to a power cut).
    Raises StoreError (one sentence, no password) for a URL that is not one.
    """
    parsed = parse_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        if parsed.drivername.startswith("sqlite"):
            return _sqlite_engine(parsed)
        return create_engine(parsed, pool_pre_ping=True)
    except (ArgumentError, ImportError, ValueError, TypeError) as exc:
        raise StoreError(f"{masked(parsed)} is not a usable database URL ({reason(exc)}).") from exc


def _sqlite_engine(url: URL) -> Engine:
    path = sqlite_file(url)
    if path is not None and path.exists() and not path.is_file():
        raise StoreError(f"the store {path} is not a regular file (a folder or a device); "
                         "name a database file.")
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder of the store {path}: "
                             f"{exc.strerror}.") from exc
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
        finally:
            cursor.close()

    return engine


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (idempotent; run on every start).

    A store that cannot be opened, read or migrated raises StoreError naming it.
    The URL is not put in Alembic's config: configparser reads `%` as interpolation,
    and the connection is handed over anyway.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except SQLAlchemyError as exc:
        raise failed(engine.url, "open", exc) from exc
    except CommandError as exc:  # e.g. a schema revision this version does not know
        raise StoreError(f"cannot migrate {describe(engine.url)}: {reason(exc)} (was it "
                         "written by a newer ultraplane?).") from exc


# --- jobs (embedded backend) ---------------------------------------------------------------


def save_job(session: Session, *, job: Job) -> Job:
    session.add(job)
    session.commit()
    session.refresh(job)
    return job


def get_job(session: Session, *, uid: str) -> Job | None:
    return session.exec(select(Job).where(Job.uid == uid)).first()


def list_jobs(session: Session) -> Sequence[Job]:
    return session.exec(select(Job).order_by(col(Job.seq))).all()


def delete_job(session: Session, *, uid: str) -> bool:
    job = get_job(session, uid=uid)
    if job is None:
        return False
    session.delete(job)
    session.commit()
    return True


# --- batched writes (the embedded backend's tick) --------------------------------------------
# One statement per table per tick, as INSERT .. ON CONFLICT DO UPDATE on SQLite and
# PostgreSQL: the ORM's select-then-update per row cost ~20 ms a job on SQLite and held
# the GIL long enough to hurt request latency.


@functools.lru_cache(maxsize=64)
def _upsert_statement(dialect: str, table: Table, columns: tuple[str, ...],
                      keys: tuple[str, ...]) -> Any:
    """Built once per table and row shape: building it (its `excluded` proxies) cost more
    than running it, once per request."""
    from sqlalchemy.dialects import postgresql, sqlite

    stmt: Any = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(table)
    updates = {c: stmt.excluded[c] for c in columns if c not in keys and c != "id"}
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=updates)


def _upsert(conn: Connection, table: Table, rows: list[dict[str, Any]], keys: list[str]) -> None:
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        conn.execute(_upsert_statement(dialect, table, tuple(rows[0]), tuple(keys)), rows)
        return
    for row in rows:  # other databases: portable but slower
        conn.execute(delete(table).where(*(table.c[k] == row[k] for k in keys)))
        conn.execute(insert(table), [row])


def table_of(model: type[SQLModel]) -> Table:
    """The SQLAlchemy table of a `table=True` model (set by SQLModel's metaclass)."""
    table: Table = model.__table__  # type: ignore[attr-defined]
    return table


def insert_job(conn: Connection, *, row: dict[str, Any]) -> None:
    """A new job's row; a second job of the same kind, namespace and name is an
    IntegrityError (the table's unique constraint), whoever wrote the first."""
    conn.execute(insert(table_of(Job)), [row])


def write_jobs(conn: Connection, *, rows: list[dict[str, Any]], removed: list[str]) -> None:
    """Delete `removed` uids, then insert or update `rows` (full job rows, keyed by uid)."""
    table = table_of(Job)
    if removed:
        conn.execute(delete(table).where(table.c.uid.in_(removed)))
    _upsert(conn, table, rows, ["uid"])


def write_accounting(
    conn: Connection, *, records: list[tuple[AccountingCreate, dict[str, tuple[float, float]]]]
) -> None:
    """Upsert job totals and per-day rows (absolute values: replaying is harmless)."""
    totals = [record.model_dump() for record, _ in records]
    days = [
        {"job_uid": r.job_uid, "namespace": r.namespace, "day": day,
         "chip_hours": hours, "energy_kwh": kwh}
        for r, split in records for day, (hours, kwh) in split.items()
    ]
    _upsert(conn, table_of(AccountingRecord), totals, ["job_uid"])
    _upsert(conn, table_of(DailyUsage), days, ["job_uid", "day"])


def write_values(conn: Connection, *, values: dict[str, str]) -> None:
    rows = [{"key": k, "value": v} for k, v in values.items()]
    _upsert(conn, table_of(KeyValue), rows, ["key"])


# --- small persistent values -----------------------------------------------------------------


def get_value(session: Session, *, key: str) -> str | None:
    row = session.get(KeyValue, key)
    return None if row is None else row.value


def set_value(session: Session, *, key: str, value: str, commit: bool = True) -> None:
    row = session.get(KeyValue, key)
    if row is None:
        session.add(KeyValue(key=key, value=value))
    else:
        row.value = value
        session.add(row)
    if commit:
        session.commit()


# --- accounting ----------------------------------------------------------------------------


def upsert_accounting(
    session: Session,
    *,
    record: AccountingCreate,
    days: dict[str, tuple[float, float]],
    commit: bool = True,
) -> AccountingRecord:
    """Write a job's totals and its per-day split (absolute values, so re-running is safe)."""
    row = session.exec(
        select(AccountingRecord).where(AccountingRecord.job_uid == record.job_uid)
    ).first()
    if row is None:
        row = AccountingRecord.model_validate(record)
    else:
        row.sqlmodel_update(record.model_dump())
    session.add(row)
    existing = {
        usage.day: usage
        for usage in session.exec(select(DailyUsage).where(DailyUsage.job_uid == record.job_uid))
    }
    for day, (chip_hours, energy_kwh) in days.items():
        usage = existing.get(day) or DailyUsage(
            job_uid=record.job_uid, namespace=record.namespace, day=day
        )
        usage.chip_hours = chip_hours
        usage.energy_kwh = energy_kwh
        session.add(usage)
    if commit:
        session.commit()
        session.refresh(row)
    return row


def list_accounting(
    session: Session,
    *,
    namespace: str | None = None,
    name: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> Sequence[AccountingRecord]:
    query = select(AccountingRecord)
    if namespace is not None:
        query = query.where(AccountingRecord.namespace == namespace)
    if name is not None:
        query = query.where(AccountingRecord.name == name)
    query = query.order_by(col(AccountingRecord.id)).offset(offset).limit(limit)
    return session.exec(query).all()


def _usage_by(session: Session, column: Any) -> list[tuple[Any, int, int, float, float, float | None]]:
    """Jobs, finished jobs, chip-hours, energy and mean completion time per value of one
    accounting column (six columns: more than sqlmodel's typed `select` overloads, so
    SQLAlchemy's own)."""
    rows = session.execute(
        sa_select(
            col(column),
            func.count(col(AccountingRecord.id)),
            func.count(col(AccountingRecord.finished_s)),
            func.coalesce(func.sum(AccountingRecord.chip_hours), 0.0),
            func.coalesce(func.sum(AccountingRecord.energy_kwh), 0.0),
            func.avg(AccountingRecord.completion_time_s),
        )
        .group_by(col(column))
        .order_by(col(column))
    ).all()
    return [(key, jobs, done, float(hours), float(kwh), None if jct is None else float(jct))
            for key, jobs, done, hours, kwh, jct in rows]


def usage_by_queue(session: Session) -> list[QueueUsage]:
    """Per tenant queue (None: the jobs outside every quota)."""
    return [QueueUsage(queue=q, jobs=n, finished_jobs=done, chip_hours=h, energy_kwh=e,
                       mean_completion_time_s=jct)
            for q, n, done, h, e, jct in _usage_by(session, AccountingRecord.queue)]


def usage_by_namespace(session: Session) -> list[NamespaceUsage]:
    return [NamespaceUsage(namespace=ns, jobs=n, finished_jobs=done, chip_hours=h, energy_kwh=e,
                           mean_completion_time_s=jct)
            for ns, n, done, h, e, jct in _usage_by(session, AccountingRecord.namespace)]


def usage_by_day(
    session: Session, *, namespace: str | None = None, since: str | None = None,
    until: str | None = None,
) -> list[DayUsage]:
    query = select(
        DailyUsage.day,
        func.count(func.distinct(DailyUsage.job_uid)),
        func.coalesce(func.sum(DailyUsage.chip_hours), 0.0),
        func.coalesce(func.sum(DailyUsage.energy_kwh), 0.0),
    )
    if namespace is not None:
        query = query.where(DailyUsage.namespace == namespace)
    if since is not None:
        query = query.where(col(DailyUsage.day) >= since)
    if until is not None:
        query = query.where(col(DailyUsage.day) <= until)
    rows = session.exec(query.group_by(col(DailyUsage.day)).order_by(col(DailyUsage.day))).all()
    return [
        DayUsage(day=day, namespace=namespace, jobs=jobs, chip_hours=float(h), energy_kwh=float(e))
        for day, jobs, h, e in rows
    ]
