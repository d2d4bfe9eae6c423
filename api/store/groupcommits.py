"""Creates that arrive together commit together: one transaction, one fsync, for all of them.

Why: a create is acknowledged only once its row is on disk (`synchronous=FULL` on SQLite, a
commit on PostgreSQL), and SQLite takes one writer at a time. Creates from a few connections
at once each waited for every commit queued before theirs, so a burst of submits cost a
disk flush each, one after another. Here the first create to get the write lock commits
every row waiting at that moment; the creates whose rows it wrote find them done when their
turn comes. Each create still answers only after the commit that holds its row, and only its
own row's error is its error: when a batch fails on a unique name (a row another server
wrote), its rows are tried one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError
from ultraplane.api import store


@dataclass
class _Row:
    values: dict[str, Any]
    error: BaseException | None = None
    done: bool = False


class GroupCommit:
    """Job rows inserted in batches under `lock`, the process's one write lock, each batch in
    one transaction of `begin` (the engine's)."""

    def __init__(self, lock: threading.Lock,
                 begin: Callable[[], AbstractContextManager[Connection]]) -> None:
        self._lock = lock
        self._begin = begin
        self._mutex = threading.Lock()  # guards `_waiting` only (never held over a write)
        self._waiting: list[_Row] = []

    def insert(self, values: dict[str, Any]) -> None:
        """Insert one job row and return once it is committed; its own error otherwise
        (IntegrityError for a name already taken, another SQLAlchemyError for the store)."""
        mine = _Row(values)
        with self._mutex:
            self._waiting.append(mine)
        with self._lock:
            if not mine.done:  # nobody took it yet: write it, and every row waiting with it
                with self._mutex:
                    batch, self._waiting = self._waiting, []
                self._commit(batch)
        if mine.error is not None:
            raise mine.error

    def _commit(self, batch: list[_Row]) -> None:
        try:
            self._write(batch)
        except IntegrityError as exc:
            if len(batch) == 1:
                batch[0].error = exc
            for row in batch if len(batch) > 1 else ():  # whose name is taken: each alone
                try:
                    self._write([row])
                except BaseException as alone:  # its own error, raised by its own create
                    row.error = alone
        except BaseException as exc:
            for row in batch:
                row.error = exc
        finally:
            for row in batch:
                row.done = True

    def _write(self, rows: list[_Row]) -> None:
        with self._begin() as conn:
            for row in rows:
                store.insert_job(conn, row=row.values)
