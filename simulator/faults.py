"""Chip and server failures: by rate (seeded) or scripted, with repair.

Why here and not in the loop: the same fault source feeds the offline replay
and its tests, and keeping the random draws in one place (one seeded RNG owned
by the engine) is what makes a faulty run reproducible. A failed chip is marked
in the allocator so nothing new lands on it; after `repair_s` (an assumption:
a swap of the failed part) it returns to service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ultraplane.simulator.events import FAULT, Engine, Event
from ultraplane.simulator.fleets import FleetShape

from ultraplane.ids import parse_chip_id

# Caps that keep a replay finite: a chip failing once per 100 chip-hours (server: per 10
# server-hours) is already thousands of times real hardware's rate, and no run draws more
# than MAX_RANDOM_FAULTS random failures (a rate of 1e308 would otherwise never advance time).
MAX_CHIP_RATE_PER_HOUR = 0.01
MAX_SERVER_RATE_PER_HOUR = 0.1
MAX_RANDOM_FAULTS = 100_000


@dataclass(frozen=True)
class FaultPlan:
    chip_rate_per_hour: float = 0.0  # failures per chip-hour
    server_rate_per_hour: float = 0.0  # failures per server-hour (all its chips)
    scripted: tuple[tuple[float, str], ...] = ()  # (t_s, chip id or server id)
    repair_s: float = 4 * 3600.0  # assumption: time to swap a failed part

    def __post_init__(self) -> None:
        if self.chip_rate_per_hour < 0 or self.server_rate_per_hour < 0 or self.repair_s <= 0:
            raise ValueError("failure rates must be >= 0 and repair time > 0")
        if self.chip_rate_per_hour > MAX_CHIP_RATE_PER_HOUR:
            raise ValueError(f"the chip failure rate must be at most {MAX_CHIP_RATE_PER_HOUR} "
                             f"per chip-hour, got {self.chip_rate_per_hour:g}")
        if self.server_rate_per_hour > MAX_SERVER_RATE_PER_HOUR:
            raise ValueError(f"the server failure rate must be at most {MAX_SERVER_RATE_PER_HOUR} "
                             f"per server-hour, got {self.server_rate_per_hour:g}")
        for _, target in self.scripted:
            _targets(target, 4)  # raises on a malformed id


def _targets(target: str, chips_per_server: int) -> list[str]:
    """A chip id is itself; a server id (`us/s03`) means each of its chips."""
    if target.count("/") == 2:
        parse_chip_id(target)
        return [target]
    us, _, server = target.partition("/")
    if not us or not server.startswith("s") or not server[1:].isdigit():
        raise ValueError(f"fault target {target!r} is neither a chip id nor a server id like 'gen2-0001/s03'")
    return [f"{target}/c{c:02d}" for c in range(chips_per_server)]


class FaultSource:
    """Schedules failures and repairs on the engine and applies them to the allocator."""

    def __init__(self, plan: FaultPlan, shape: FleetShape, engine: Engine, allocator: Any) -> None:
        self.plan, self.shape, self.engine, self.allocator = plan, shape, engine, allocator
        self.failed: set[str] = set(shape.failed)
        self._chips: list[str] = []
        self._servers = 0
        self.injected = 0
        self.pending_repairs = 0
        self._drawn = 0

    def start(self) -> None:
        for at, target in self.plan.scripted:
            self.engine.schedule(max(at, self.engine.now), FAULT, Event("fail", target))
        if self.plan.chip_rate_per_hour or self.plan.server_rate_per_hour:
            self._chips = self.shape.chip_ids()
            self._schedule_random()

    def _rate_per_s(self) -> float:
        n, servers = len(self._chips), self.shape.server_count()
        return (n * self.plan.chip_rate_per_hour + servers * self.plan.server_rate_per_hour) / 3600.0

    def _schedule_random(self) -> None:
        self._drawn += 1
        if self._drawn > MAX_RANDOM_FAULTS:
            return
        rng = self.engine.rng
        at = self.engine.now + rng.expovariate(self._rate_per_s())
        chip = rng.choice(self._chips)
        n, servers = len(self._chips), self.shape.server_count()
        chip_share = n * self.plan.chip_rate_per_hour
        is_server = rng.random() * (chip_share + servers * self.plan.server_rate_per_hour) >= chip_share
        target = chip.rsplit("/", 1)[0] if is_server else chip
        self.engine.schedule(at, FAULT, Event("fail", (target, True)))

    def failed_count(self) -> int:
        return len(self.failed)

    def apply(self, ev: Event, t: float, *, active: bool) -> dict[str, list[str]]:
        """Fail or repair chips; returns {job key: chips it lost} for running jobs hit."""
        if ev.kind == "repair":
            self.pending_repairs -= 1
            for chip in ev.payload:
                if chip in self.failed:
                    self.failed.discard(chip)
                    self.allocator.set_chip_failed(chip, False)
            return {}
        target, random_draw = ev.payload if isinstance(ev.payload, tuple) else (ev.payload, False)
        if random_draw and active:
            self._schedule_random()
        us = target.partition("/")[0]
        hw = self.shape.hardware_of.get(us)
        if hw is None:
            raise ValueError(f"fault target {target!r} names an unknown UltraServer")
        hit: dict[str, list[str]] = {}
        newly: list[str] = []
        for chip in _targets(target, hw.chips_per_server):
            if chip in self.failed:
                continue
            job = self.allocator.job_of(chip)
            self.allocator.set_chip_failed(chip, True)
            self.failed.add(chip)
            newly.append(chip)
            if job is not None:
                hit.setdefault(str(job), []).append(chip)
        if newly:
            self.injected += 1
            self.pending_repairs += 1
            self.engine.schedule(t + self.plan.repair_s, FAULT, Event("repair", tuple(newly)))
        return hit
