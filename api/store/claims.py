"""Opening the store safely: one sentence for every way it can be broken, and one owner.

A store is the embedded backend's memory across restarts, so a broken one must
stop `ultraplane serve` at start-up with a sentence naming the file (exit 2),
not a traceback half way through loading it, and a failing one at run time
must answer 503 rather than acknowledge a change it did not keep.

Two live servers on one store would each requeue the other's jobs and book the
same chips twice, so an embedded server claims its store for its lifetime: an
OS file lock beside a SQLite file, a session advisory lock on PostgreSQL. Both
are released by the kernel or the database when the process dies, even by
`kill -9`, so a restart never waits for a stale claim.

URLs are shown with their password masked, everywhere.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

RETRY_AFTER_S = 2
# Any constant: advisory locks are per database, so this names "the embedded server" in it.
ADVISORY_KEY = 0x756C7472  # "ultr"


class StoreError(Exception):
    """The store cannot be used; the message is one sentence that names it (no password)."""


def parse_url(url: str) -> URL:
    """The URL, parsed as a URL (so a `%40` in a password is an `@`), or a StoreError."""
    try:
        return make_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:  # e.g. a port that is no number
        raise StoreError(f"{masked(url)} is not a database URL, e.g. sqlite:///FILE or "
                         "postgresql://USER:PASSWORD@HOST/DB") from exc


def masked(url: str | URL) -> str:
    """The URL as it may be shown: the password as `***`, even if it does not parse."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        head, at, tail = url.rpartition("@")
        if not at:
            return url
        scheme, sep, creds = head.partition("://")
        user = creds.split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{tail}" if sep else f"***@{tail}"


def sqlite_file(url: URL) -> Path | None:
    """The file of a SQLite URL (`file:` URIs too); None for memory or another database."""
    if not url.drivername.startswith("sqlite"):
        return None
    database = url.database or ""
    if database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    if not database or database == ":memory:":
        return None
    return Path(database).expanduser().absolute()


def describe(url: URL) -> str:
    """How an error names the store: the SQLite file, or the masked URL."""
    path = sqlite_file(url)
    return f"the store {path}" if path is not None else f"the store {masked(url)}"


def reason(exc: BaseException) -> str:
    """The database's own first line of an error (`database or disk is full`), no SQL."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return (lines[0] if lines else type(orig).__name__).rstrip(".")


def failed(url: URL, action: str, exc: BaseException) -> StoreError:
    return StoreError(f"cannot {action} {describe(url)}: {reason(exc)}.")


def check(engine: Engine) -> None:
    """Read the whole store and write one value, or raise a StoreError naming it.

    SQLite's quick_check reads every page, so a store corrupted in mid-file is found
    now rather than when a tick first touches the bad page; the write finds a read-only
    or full store before the first request is acknowledged.
    """
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                problems = [row[0] for row in conn.execute(text("PRAGMA quick_check"))]
                if problems != ["ok"]:
                    lines = [ln.strip() for p in problems for ln in str(p).splitlines()]
                    first = next((ln for ln in lines if ln and not ln.startswith("***")), "?")
                    raise StoreError(f"{describe(engine.url)} is corrupt ({len(lines)} problems "
                                     f"found, the first: {first.rstrip('.')}).")
            for table in ("jobs", "kv"):  # what a start loads
                conn.execute(text(f"SELECT * FROM {table}")).fetchall()
            _write_probe(conn)
    except SQLAlchemyError as exc:
        raise failed(engine.url, "use", exc) from exc


def _write_probe(conn: Connection) -> None:
    from ultraplane.api import store

    store.write_values(conn, values={"store_opened_s": repr(time.time())})


class Claim:
    """This process's exclusive hold on a store; `release()` (or process death) lets it go."""

    def __init__(self, engine: Engine, *, wait_s: float = 5.0) -> None:
        self.url = engine.url
        self._file: IO[str] | None = None
        self._conn: Connection | None = None
        path = sqlite_file(engine.url)
        if path is not None:
            self._claim_file(path.with_name(path.name + ".lock"), wait_s)
        elif engine.dialect.name == "postgresql":
            self._claim_advisory(engine, wait_s)

    def _claim_file(self, lock: Path, wait_s: float) -> None:
        try:
            handle = lock.open("a+")
        except OSError as exc:
            raise StoreError(f"cannot lock {describe(self.url)} ({lock}: {exc.strerror}).") from exc
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    owner = handle.read().strip() or "another process"
                    handle.close()
                    raise StoreError(
                        f"{describe(self.url)} is in use by another ultraplane serve "
                        f"({owner}); stop it or pick another --db.") from None
                time.sleep(0.1)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._file = handle

    def _claim_advisory(self, engine: Engine, wait_s: float) -> None:
        # The session holding the lock must stay open as long as the claim: a connection of
        # its own, outside the pool's reuse. A killed server's session ends with its socket.
        deadline = time.monotonic() + wait_s
        try:
            conn = engine.connect()
            while not conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                   {"k": ADVISORY_KEY}).scalar():
                conn.rollback()
                if time.monotonic() >= deadline:
                    conn.close()
                    raise StoreError(f"{describe(self.url)} is in use by another ultraplane "
                                     "serve; stop it or pick another --db.")
                time.sleep(0.2)
            conn.commit()
        except SQLAlchemyError as exc:
            raise failed(self.url, "lock", exc) from exc
        self._conn = conn

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None
        if self._conn is not None:
            try:
                # invalidate, not close: a closed connection goes back to the pool with its
                # session (and the lock) still open
                self._conn.invalidate()
            except SQLAlchemyError:
                pass
            finally:
                self._conn = None

    def __del__(self) -> None:
        self.release()


def unavailable(url: URL, exc: BaseException, *, saving: bool = True) -> Any:
    """The 503 a request gets when the store did not commit its change (or, `saving`
    False, could not be read)."""
    from ultraplane.api.errors import ApiError

    what = "did not save the change" if saving else "could not be read"
    after = "; nothing was changed" if saving else ""
    return ApiError(503, "StoreUnavailable", None,
                    f"{describe(url)} {what} ({reason(exc)}){after}; retry in {RETRY_AFTER_S} s",
                    headers={"Retry-After": str(RETRY_AFTER_S)})
