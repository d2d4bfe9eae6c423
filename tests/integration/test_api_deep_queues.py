"""One submit costs the same with 10,000 jobs queued as with 1,000 (the real app, SQLite).

Why a count of calls and not a time: the cost that grew with the queue's depth was work
(every submit woke a tick whose scheduling cycle walked the whole queue), and work counted is
the same on an idle laptop and on a loaded 2-core CI machine. Every Python function called
while the embedded backend takes one create and runs the tick it wakes is counted
(`sys.setprofile`, this thread only: the backend is called directly, and the HTTP layer in
front of it does the same work at any depth).

Fleet (8 Gen2 UltraServers, 1,152 chips), as `bench/api.py` loads it:

    block-000: [gen2-0000 .. gen2-0007]   624 chips held by long jobs (outside the queues)
    queue:     whole-fleet jobs (1,152 chips, network-1) that wait: the first of them holds
               the EASY reservation, the rest are carried over from cycle to cycle

The clock moves one wall second (a simulated minute) before each measured tick, so the
running jobs' predicted ends, and with them the reservation's predicted start, move as they do
in a live server.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from ultraplane.api.backends.embedded import EmbeddedBackend

from tests.integration.test_api_endpoints import Fleet, make_fleet
from ultraplane.resources import TrainingJobSpec

# bench/api.py's fixed load: 624 chips in mixed gang sizes, ten days each
LOAD = [(36, "rack")] * 8 + [(16, "rack")] * 8 + [(4, "server")] * 16 + [(144, "ultraserver")]
WAITING = TrainingJobSpec.model_validate({
    "chips": 1152, "topology": {"requiredLevel": "network-1"}, "priority": 0,
    "work": {"durationSeconds": 3600}})
# Two teams in one cohort; the queued jobs' namespace uses team-a and borrows team-b's half.
QUEUES = """
- name: team-a
  nominal: {trn3-gen2: 576}
  cohort: lab
  namespaces: [queue]
  defaultFor: [queue]
- name: team-b
  nominal: {trn3-gen2: 576}
  cohort: lab
"""


@pytest.fixture(params=["no queues", "tenant queues"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    overrides: dict[str, Any] = {}
    if request.param == "tenant queues":
        path = tmp_path / "queues.yaml"
        path.write_text(QUEUES)
        overrides["queues"] = str(path)
    yield from make_fleet(tmp_path, **overrides)


def queue_up(backend: EmbeddedBackend, first: int, last: int) -> None:
    """Jobs q-{first} .. q-{last - 1}, created through the backend as the API creates them."""
    for i in range(first, last):
        backend.create_job("TrainingJob", "queue", f"q-{i:06d}", WAITING, {})


def calls_per_submit(fleet: Fleet, backend: EmbeddedBackend, tag: str) -> int:
    """Python calls of one create and the tick it wakes (the median of five submits)."""
    counts = []

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            counts[-1] += 1

    for i in range(5):
        fleet.now[0] += 1.0  # the predicted ends move, as in a live server
        counts.append(0)
        sys.setprofile(count)
        try:
            backend.create_job("TrainingJob", "queue", f"{tag}-{i}", WAITING, {})
            backend.tick()
        finally:
            sys.setprofile(None)
    return int(statistics.median(counts))


def test_one_submit_costs_the_same_at_1000_and_at_10000_queued(fleet: Fleet) -> None:
    backend = fleet.app.state.backend
    for i, (chips, level) in enumerate(LOAD):
        fleet.submit(f"load-{i:02d}", chips, duration=10 * 86_400, level=level)
    fleet.advance(1)
    running = fleet.client.get("/v1/ultraservers").json()["items"]
    assert sum(u["allocatedChips"] for u in running) == sum(chips for chips, _ in LOAD)

    queue_up(backend, 0, 1_000)
    fleet.advance(1)
    shallow = calls_per_submit(fleet, backend, "a")
    queue_up(backend, 1_000, 10_000)
    fleet.advance(1)
    deep = calls_per_submit(fleet, backend, "b")

    waiting = fleet.client.get("/v1/namespaces/queue/trainingjobs/q-009999").json()["status"]
    assert waiting["phase"] == "Pending"
    # O(1) in the depth: the same work give or take what a set's order changes. (Before,
    # each submit's cycle tried every queued job: 10x the calls at 10x the depth.)
    assert deep < 1.5 * shallow, (shallow, deep)
