"""Predictions the scheduler decides with: how much a split slows a gang, and when chips free up.

Why in the core: two scheduling rules need numbers, not guesses, and the operator, the REST
API and the trace replay must get the same numbers.
- *Split only when it pays* (`mode: SplitWhenItPays`) weighs the slowdown of a placement
  spread over several UltraServers against the wait for one UltraServer.
- *EASY backfilling* reserves, for the first waiting gang of whole UltraServers, the domain
  that drains soonest, and lets a later job onto it only if it ends before the reservation
  starts (Slurm's backfill rule).

The slowdown model is the simulator's (`simulator/models.spread_slowdown` calls `stretch`
here): a trace job's run time was measured at the tightest placement its size allows, and a
share `COMM_FRACTION` of it is communication, which stretches with the slowest per-chip
link the spread crosses (the profile's bandwidth per level; EFA between UltraServers).
End times come from the callers: the replay knows them; the operator estimates them from a
job's `work` and progress; a job without one counts as running forever (never drains).
Status messages show a predicted wait or margin as `span` writes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ultraplane.hardware.profiles import load_profile

if TYPE_CHECKING:
    from ultraplane.placement.allocator import Allocator, Placement

__all__ = [
    "COMM_FRACTION", "bottleneck_gbytes_per_s", "drain_time", "earliest_start", "ideal_level",
    "placed_slowdown", "span", "split_slowdown", "stretch",
]

#: Share of a trace job's step that is communication (the simulator's `trace_comm_fraction`).
COMM_FRACTION = 0.10
_INTRA = ("server", "rack", "ultraserver")
NEVER = math.inf


def ideal_level(profile: str, chips: int) -> str:
    """Tightest level a gang of `chips` fits in on an empty UltraServer of `profile`."""
    p = load_profile(profile)
    per_rack = p.chips_per_ultraserver // max(p.racks_per_ultraserver, 1)
    if chips <= p.chips_per_server:
        return "server"
    if p.racks_per_ultraserver > 1 and chips <= per_rack:
        return "rack"
    return "ultraserver" if chips <= p.chips_per_ultraserver else "network-1"


def bottleneck_gbytes_per_s(profile: str, level: str) -> float:
    """The slowest per-chip link (GB/s) a gang spread up to `level` crosses."""
    p = load_profile(profile)
    bw = {str(k): float(v) for k, v in dict(p.bandwidth_gbps).items()}
    path: list[float] = []
    for lvl in _INTRA:
        if lvl in bw:
            path.append(bw[lvl])
        if lvl == level:
            return min(path) if path else _efa(profile)
    return min([*path, _efa(profile)])


def _efa(profile: str) -> float:
    p = load_profile(profile)
    return float(p.efa_gbps) / 8.0 / p.chips_per_ultraserver


def stretch(ideal_gbytes_per_s: float, here_gbytes_per_s: float,
            comm_fraction: float = COMM_FRACTION) -> float:
    """Run-time factor (>= 1) when the communication share runs at `here` instead of `ideal`."""
    f = comm_fraction
    return max(1.0, (1.0 - f) + f * ideal_gbytes_per_s / here_gbytes_per_s)


def split_slowdown(profile: str, level: str, chips: int,
                   comm_fraction: float = COMM_FRACTION) -> float:
    """Predicted run-time factor of a gang of `chips` placed at `level` (1.0 = ideal)."""
    if chips <= 1:
        return 1.0
    ideal = bottleneck_gbytes_per_s(profile, ideal_level(profile, chips))
    return stretch(ideal, bottleneck_gbytes_per_s(profile, level), comm_fraction)


def placed_slowdown(allocator: Allocator, placement: Placement, chips: int) -> float:
    """`split_slowdown` of a gang of `chips` where `allocator` placed it."""
    profile = allocator.profile_of(placement.ultraservers[0])
    return split_slowdown(profile, placement.level, chips)


def drain_time(releases: Iterable[tuple[float, int]], now: float) -> float:
    """When an UltraServer whose jobs end at these (end, chips) times is empty."""
    return max((max(end, now) for end, _ in releases), default=now)


def earliest_start(free: Mapping[str, tuple[int, list[tuple[float, int]]]], chips: int,
                   now: float) -> float:
    """The earliest time some UltraServer has `chips` free, from its free chips now and the
    (end, chips) of the jobs on it; `NEVER` when no prediction says so. Fragmentation
    inside the UltraServer and other waiting jobs are ignored (an optimistic estimate)."""
    best = NEVER
    for have, releases in free.values():
        if have >= chips:
            return now
        for end, n in sorted(releases):
            if end >= best:
                break
            have += n
            if have >= chips:
                best = max(end, now)
                break
    return best


def span(seconds: float | None) -> str:
    """A duration for a status message: 45 s, 12.5 min, 3.2 h."""
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
