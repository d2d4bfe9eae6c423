"""The simulated fleet: which hardware each UltraServer is, and its power over time.

Why a ledger instead of per-chip objects: a 10,000-chip replay changes state
hundreds of thousands of times; keeping one running fleet power and one busy
count per UltraServer makes each change O(UltraServers touched) while still
integrating energy exactly (power is piecewise constant between events).
Idle chips draw the profile's idle power, busy chips idle + dynamic x
utilisation (see `models.Hardware.chip_power`), so fleet power follows load.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ultraplane.simulator.models import Hardware, hardware_from_profile

from ultraplane.hardware.profiles import load_profile
from ultraplane.ids import chip_id


@cache
def hardware(profile: str) -> Hardware:
    """The model figures of a profile name (cached: profiles are immutable)."""
    return hardware_from_profile(load_profile(profile))


def ultraservers_of(topology: Any) -> list[Any]:
    """The topology's UltraServers as a list, whatever container it exposes."""
    us = topology.ultraservers
    return list(us.values()) if isinstance(us, Mapping) else list(us)


@dataclass(frozen=True)
class FleetShape:
    """Static facts of the fleet, built once per run."""

    names: tuple[str, ...]
    hardware_of: dict[str, Hardware]
    chips_of: dict[str, int]
    failed: frozenset[str]  # chip ids failed at the start

    @classmethod
    def of(cls, topology: Any) -> FleetShape:
        names: list[str] = []
        hw: dict[str, Hardware] = {}
        chips: dict[str, int] = {}
        failed: set[str] = set()
        for us in ultraservers_of(topology):
            names.append(us.name)
            hw[us.name] = hardware(us.profile)
            chips[us.name] = int(getattr(us, "chip_count", hw[us.name].chips_per_ultraserver))
            for ref in us.failed_chips:
                failed.add(f"{us.name}/{ref}")
        return cls(tuple(names), hw, chips, frozenset(failed))

    @property
    def total_chips(self) -> int:
        return sum(self.chips_of.values())

    def chip_ids(self) -> list[str]:
        """Every chip id, in UltraServer order (for picking failures at random)."""
        return [c for name in self.names for c in self.chip_ids_of(name)]

    def chip_ids_of(self, name: str) -> list[str]:
        hw = self.hardware_of[name]
        servers = self.chips_of[name] // hw.chips_per_server
        return [chip_id(name, s, c) for s in range(servers) for c in range(hw.chips_per_server)]

    def server_count(self) -> int:
        return sum(self.chips_of[n] // self.hardware_of[n].chips_per_server for n in self.names)

    def idle_watts(self) -> float:
        return sum(self.hardware_of[n].idle_watts * self.chips_of[n] for n in self.names)


def chips_per_ultraserver(chip_ids: Iterable[str]) -> dict[str, int]:
    """How many of `chip_ids` sit in each UltraServer."""
    return dict(Counter(c.partition("/")[0] for c in chip_ids))


class Ledger:
    """Busy chips per UltraServer and fleet power, integrated to energy over time."""

    def __init__(self, shape: FleetShape, *, start: float = 0.0) -> None:
        self.shape = shape
        self.t = start
        self.power_w = shape.idle_watts()
        self.peak_w = self.power_w
        self.energy_j = 0.0
        self.busy = 0
        self.busy_chip_s = 0.0
        self.busy_of: dict[str, int] = dict.fromkeys(shape.names, 0)
        self.changes = 0  # bumped by every occupy: readers cache what they derive from busy_of

    def advance(self, t: float) -> None:
        dt = t - self.t
        if dt > 0:
            self.energy_j += self.power_w * dt
            self.busy_chip_s += self.busy * dt
            self.t = t

    def job_watts(self, per_us: Mapping[str, int], utilization: float, precision: str,
                  assumptions: Any) -> float:
        """Extra watts (over idle) a job at `utilization` adds on these chips."""
        extra = 0.0
        for name, n in per_us.items():
            hw = self.shape.hardware_of[name]
            extra += n * (hw.chip_power(utilization, precision, assumptions) - hw.idle_watts)
        return extra

    def occupy(self, per_us: Mapping[str, int], extra_w: float, sign: int) -> None:
        """Add (sign=+1) or remove (-1) a running job; call `advance` first."""
        self.changes += 1
        for name, n in per_us.items():
            self.busy_of[name] += sign * n
            self.busy += sign * n
        self.power_w += sign * extra_w
        if self.power_w > self.peak_w:
            self.peak_w = self.power_w

    def adjust(self, delta_w: float) -> None:
        """Change the fleet's draw without changing occupancy (a power cap moved, an
        UltraServer powered down or woke); call `advance` first."""
        self.power_w += delta_w
        if self.power_w > self.peak_w:
            self.peak_w = self.power_w

    def occupancy(self, order: Sequence[str]) -> list[float]:
        """Busy fraction of each UltraServer, in `order`."""
        return [self.busy_of[n] / self.shape.chips_of[n] for n in order]
