"""Jobs created at the same time are queued in the order they were created
(`ultraplane.api.backends.arrivals`), whichever create commits its row first."""

from __future__ import annotations

from ultraplane.api.backends.arrivals import Arrivals
from ultraplane.api.backends.embeddedjobs import JobState

from ultraplane.resources import TrainingJobSpec

SPEC = TrainingJobSpec.model_validate({"chips": 4, "work": {"durationSeconds": 60}})


def job(seq: int) -> JobState:
    return JobState(uid=f"u{seq}", kind="TrainingJob", namespace="ns", name=f"j{seq}",
                    spec=SPEC, seq=seq, created_s=float(seq), labels={})


def test_a_job_committed_before_an_earlier_one_waits_for_it() -> None:
    arrivals = Arrivals()
    for seq in (1, 2, 3):
        arrivals.expect(seq)
    two, one, three = job(2), job(1), job(3)
    assert arrivals.arrived(2, two) == []  # 1 is still committing
    assert arrivals.arrived(1, one) == [one, two]
    assert arrivals.arrived(3, three) == [three]
    assert len(arrivals) == 0


def test_a_failed_create_lets_the_ones_after_it_through() -> None:
    arrivals = Arrivals()
    for seq in (1, 2, 3):
        arrivals.expect(seq)
    three = job(3)
    assert arrivals.arrived(3, three) == []
    assert arrivals.arrived(2, None) == []  # refused (409, 422, 503): nothing to queue
    assert arrivals.arrived(1, None) == [three]
    assert len(arrivals) == 0


def test_a_job_created_and_committed_at_once_comes_after_the_creates_in_flight() -> None:
    arrivals = Arrivals()
    arrivals.expect(1)
    demo = job(2)  # the demo stream: numbered, registered and queued in one hold of the lock
    assert arrivals.arrived(2, demo) == []
    one = job(1)
    assert arrivals.arrived(1, one) == [one, demo]
