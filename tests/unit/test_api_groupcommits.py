"""Creates that wait for the write lock together commit together, each with its own error
(`ultraplane.api.store.groupcommits`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from ultraplane.api.store import groupcommits


class Store:
    """Transactions that keep their rows only when they commit; a name in `taken` is a
    unique-constraint error, as another server's row would be."""

    def __init__(self, taken: set[str] = frozenset(), broken: bool = False) -> None:  # type: ignore[assignment]
        self.committed: list[list[str]] = []  # one list of names per committed transaction
        self.taken = taken
        self.broken = broken

    @contextmanager
    def begin(self) -> Iterator[list[str]]:
        rows: list[str] = []
        yield rows
        if self.broken:
            raise OperationalError("COMMIT", {}, Exception("disk I/O error"))
        self.committed.append(rows)

    def insert_job(self, conn: list[str], *, row: dict[str, Any]) -> None:
        if row["name"] in self.taken:
            raise IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))
        conn.append(row["name"])


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "condition not met in 60 s"
        time.sleep(0.001)


def inserted_together(store: Store, names: list[str],
                      monkeypatch: pytest.MonkeyPatch) -> dict[str, BaseException | None]:
    """Each name inserted by its own thread while the write lock is held elsewhere, so all
    of them wait for it together; what each insert raised."""
    monkeypatch.setattr(groupcommits.store, "insert_job", store.insert_job)
    lock = threading.Lock()
    commits = groupcommits.GroupCommit(lock, store.begin)  # type: ignore[arg-type]
    outcome: dict[str, BaseException | None] = {}

    def insert(name: str) -> None:
        try:
            commits.insert({"name": name})
            outcome[name] = None
        except BaseException as exc:
            outcome[name] = exc

    threads = [threading.Thread(target=insert, args=(name,)) for name in names]
    with lock:  # a persist is writing
        for thread in threads:
            thread.start()
        wait_for(lambda: len(commits._waiting) == len(names))
    for thread in threads:
        thread.join(timeout=60)
    assert set(outcome) == set(names)
    return outcome


def test_creates_waiting_together_commit_in_one_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    outcome = inserted_together(store, ["a", "b", "c"], monkeypatch)
    assert outcome == {"a": None, "b": None, "c": None}
    assert [sorted(rows) for rows in store.committed] == [["a", "b", "c"]]


def test_a_name_already_taken_fails_its_own_create_only(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(taken={"b"})
    outcome = inserted_together(store, ["a", "b", "c"], monkeypatch)
    assert outcome["a"] is None and outcome["c"] is None
    assert isinstance(outcome["b"], IntegrityError)
    assert sorted(name for rows in store.committed for name in rows) == ["a", "c"]


def test_a_commit_that_fails_fails_every_create_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(broken=True)
    outcome = inserted_together(store, ["a", "b"], monkeypatch)
    assert all(isinstance(exc, OperationalError) for exc in outcome.values())
    assert store.committed == []
