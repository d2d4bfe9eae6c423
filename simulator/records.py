"""What a replay produced: per-job records, placements and sampled time series.

Why separate from the loop: reports (JSON, CSV, plots) and tests read these
plain records without importing the allocator or the event engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ultraplane.simulator.powerside import PowerFigures
    from ultraplane.simulator.tenants import TenantFigures


@dataclass(slots=True)
class JobRecord:
    job_id: str
    submit_s: float
    chips: int
    start_s: float | None = None
    end_s: float | None = None
    ultraservers: int = 0
    energy_kwh: float = 0.0
    status: str = "pending"  # completed | failed | rejected | unfinished
    reason: str = ""
    duration_s: float = 0.0  # the trace's run time (at the tightest placement, no overheads)
    max_ultraservers: int = 0  # most UltraServers any attempt spanned
    tenant: str = ""  # the trace's tenant (its queue), if it names one
    moves: int = 0  # times the core moved it while running (`ultraplane.scheduling.moves`)

    @property
    def queue_delay_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.submit_s

    @property
    def stretch(self) -> float | None:
        """Wall time from first start to end over the trace's run time (>= 1 with overheads,
        slowdown of a split or restarts)."""
        if self.end_s is None or self.start_s is None or self.duration_s <= 0:
            return None
        return (self.end_s - self.start_s) / self.duration_s


@dataclass(slots=True)
class Series:
    """(t, busy chips, fleet watts, queued jobs) after every instant that changed something."""

    t: list[float] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)

    def add(self, t: float, busy: int, power_w: float, queued: int) -> None:
        if self.t and self.t[-1] == t:
            self.busy[-1], self.power_w[-1], self.queued[-1] = busy, power_w, queued
            return
        self.t.append(t)
        self.busy.append(busy)
        self.power_w.append(power_w)
        self.queued.append(queued)


@dataclass(slots=True)
class Steps:
    """A piecewise-constant series with one sample per change: (t, value) appended only when
    the value differs from the last, the last replaced when it changes again at the same t."""

    t: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)

    def add(self, t: float, v: float) -> None:
        if self.t and self.t[-1] == t:
            self.v[-1] = v
            if len(self.v) > 1 and self.v[-2] == v:  # back to what it was: no change
                self.t.pop()
                self.v.pop()
            return
        if self.v and self.v[-1] == v:
            return
        self.t.append(t)
        self.v.append(v)


@dataclass(frozen=True, slots=True)
class MoveRecord:
    """One move of a running job (`ultraplane.scheduling.moves`): when, from which
    UltraServers to which, for which waiting job, and the chip-seconds of work and restart
    it lost."""

    t: float
    job_id: str
    by: str
    origin: tuple[str, ...]
    to: tuple[str, ...]
    lost_chip_s: float


@dataclass
class ReplayResult:
    policy: str
    total_chips: int
    ultraservers: list[str]
    records: list[JobRecord] = field(default_factory=list)
    placements: list[tuple[str, float, str, tuple[str, ...]]] = field(default_factory=list)
    series: Series = field(default_factory=Series)
    heat_t: list[float] = field(default_factory=list)
    heat: list[list[float]] = field(default_factory=list)
    power: PowerFigures | None = None  # with budgets or power-down (simulator/powerside.py)
    idle_power_w: float | None = None  # this run's fleet with every chip idle and powered
    energy_kwh: float = 0.0
    busy_chip_s: float = 0.0
    peak_power_w: float = 0.0
    events: int = 0
    starts: int = 0
    t0: float = 0.0
    t_end: float = 0.0
    tenants: TenantFigures | None = None  # per-tenant figures, when the replay had queues
    # (start, end, chips, ideal seconds of work it kept) of every attempt that ended: the
    # training work done within a window (simulator/inferencereports.py)
    attempts: list[tuple[float, float, int, float]] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)  # simulator/services.Service, if any
    # (victim, by, time, the reason said on the victim) of every preemption
    preemptions: list[tuple[str, str, float, str]] = field(default_factory=list)
    inference_splits: int = 0  # service replicas placed over more than one UltraServer
    moves: int = 0  # running jobs moved to make room for a guaranteed job
    moved_lost_chip_s: float = 0.0  # chip-seconds of work and restarts those moves lost
    move_log: list[MoveRecord] = field(default_factory=list)  # each of those moves
