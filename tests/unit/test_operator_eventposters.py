"""The operator's Event poster (operator/eventposters.py): kept until kopf's context is
captured, within the budget, and nothing at all when Events are off."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from ultraplane.operator.eventposters import EventPoster

JOB = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
       "metadata": {"namespace": "ns", "name": "a", "uid": "u"}}


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    sent: list[tuple[str, str, str]] = []

    def event(body: Any, *, type: str, reason: str, message: str) -> None:
        sent.append((type, reason, message))

    monkeypatch.setattr(kopf, "event", event)
    return sent


def test_events_before_the_first_handler_wait_for_its_context(
        posted: list[tuple[str, str, str]]) -> None:
    poster = EventPoster(qps=0, burst=10)
    poster.post(JOB, "Normal", "Admitted", "a" * 2000)
    assert posted == []  # no handler has run yet: kopf's poster is not reachable
    poster.capture()
    assert posted == [("Normal", "Admitted", "a" * 1000)]  # kept, then cut to the limit
    poster.post(JOB, "Normal", "Running", "on its chips")
    assert posted[-1] == ("Normal", "Running", "on its chips")


def test_past_the_burst_events_wait_for_a_digest(posted: list[tuple[str, str, str]]) -> None:
    now = [0.0]
    poster = EventPoster(qps=1, burst=2, digest_seconds=10, clock=lambda: now[0])
    poster.capture()
    for i in range(5):
        poster.post({**JOB, "metadata": {**JOB["metadata"], "name": f"j{i}"}},
                    "Normal", "Admitted", f"j{i} admitted")
    assert [m for _, _, m in posted] == ["j0 admitted", "j1 admitted"]


def test_no_events_when_they_are_off(posted: list[tuple[str, str, str]]) -> None:
    poster = EventPoster(enabled=False)
    poster.capture()
    poster.post(JOB, "Warning", "Failed", "a chip failed")
    assert posted == []
