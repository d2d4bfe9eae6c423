"""The operator's inputs to the core's predictions: a running job's end from its progress."""

from __future__ import annotations

from datetime import UTC, datetime

from ultraplane.operator.jobviews import expected_end
from ultraplane.operator.statuses import admitted

from ultraplane.hardware.topology import build_fleet
from ultraplane.placement.allocator import Allocator, PlacementRequest

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_expected_end_scales_elapsed_time_by_the_progress_left() -> None:
    # started an hour ago, 25% done: three more hours
    status = {"startTime": "2026-01-01T11:00:00Z", "progressPercent": 25.0}
    assert expected_end(status, NOW) == NOW.timestamp() + 3 * 3600


def test_no_prediction_without_progress_or_a_start() -> None:
    assert expected_end({}, NOW) is None
    assert expected_end({"startTime": "2026-01-01T11:00:00Z", "progressPercent": 0}, NOW) is None
    assert expected_end({"startTime": "not a time", "progressPercent": 10}, NOW) is None
    assert expected_end({"startTime": "2026-01-01T13:00:00Z", "progressPercent": 10}, NOW) is None


def test_admitted_message_carries_the_schedulers_note() -> None:
    placement = Allocator(build_fleet("trn3-gen2", 1)).place(PlacementRequest(chips=4))
    assert not hasattr(placement, "kind")
    status = admitted({}, placement, NOW, note="split over 2 UltraServers because it pays: x")  # type: ignore[arg-type]
    assert status["message"].endswith("Split over 2 UltraServers because it pays: x.")
