"""Which UltraServers are powered down, and when an idle one should be.

Why per UltraServer, decided in the core: Slurm's power_save powers down idle nodes; on
Trainium the unit that matters is the UltraServer (its NeuronSwitch domain is what a gang
needs whole), and the decision must be the same in the operator and the replay, so it is
made here from the book's own view of which UltraServers hold jobs, with the caller's clock.

An UltraServer with no job for `idle_after_s` seconds (0 = never) is powered down: it draws
its profile's standby power and leaves the budgets' idle floor. The scheduler places jobs on
powered UltraServers first (`Scheduler` holds powered-down ones back on a first try); a job
that can only fit on a powered-down one wakes it and starts after the profile's
`wake_seconds`. Whether an UltraServer is powered down never changes what fits, only where.
"""

from __future__ import annotations

from collections.abc import Mapping

from ultraplane.hardware.powermodels import chip_power_of

__all__ = ["PowerStates"]


class PowerStates:
    """Idle timers and powered-down UltraServers of one fleet."""

    def __init__(self, idle_after_s: float = 0.0) -> None:
        if idle_after_s < 0:
            raise ValueError(f"idle power-down must be 0 (off) or positive seconds, "
                             f"got {idle_after_s!r}")
        self.idle_after_s = idle_after_s
        self._idle_since: dict[str, float | None] = {}  # None: holds a job
        self._down: set[str] = set()
        self._ready: dict[str, float] = {}  # woken UltraServer -> when it is up
        self._wake_s: dict[str, float] = {}

    def bind(self, chips: Mapping[str, int], profiles: Mapping[str, str] | None = None,
             now: float = 0.0) -> None:
        """Adopt a fleet: every UltraServer powered and idle since `now`."""
        self._idle_since = dict.fromkeys(chips, now)
        self._down.clear()
        self._ready.clear()
        self._wake_s = {us: chip_power_of(p).wake_s for us, p in (profiles or {}).items()}

    def set_wake(self, wake_s: Mapping[str, float]) -> None:
        self._wake_s = dict(wake_s)

    @property
    def enabled(self) -> bool:
        return self.idle_after_s > 0

    def is_down(self, us: str) -> bool:
        return us in self._down

    def down(self) -> frozenset[str]:
        return frozenset(self._down)

    def busy(self, us: str, now: float | None) -> None:
        """A job holds chips on `us`: wake it if it was powered down."""
        self._idle_since[us] = None
        if us in self._down:
            self._down.discard(us)
            self._ready[us] = (now or 0.0) + self._wake_s.get(us, 0.0)

    def idle(self, us: str, now: float | None) -> None:
        """The last job on `us` left."""
        self._idle_since[us] = now or 0.0

    def ready_at(self, us: str) -> float | None:
        """When a woken UltraServer is up (None: it was not woken, or has been up a while)."""
        return self._ready.get(us)

    def due(self, now: float) -> list[str]:
        """Power down every UltraServer idle for `idle_after_s` by `now`; returns them."""
        if not self.enabled:
            return []
        out = [us for us, since in self._idle_since.items()
               if since is not None and us not in self._down
               and now - since >= self.idle_after_s and self._ready.get(us, -1.0) <= now]
        for us in out:
            self._down.add(us)
            self._ready.pop(us, None)
        return out

    def next_due(self) -> float | None:
        """When the next idle UltraServer is due to power down (None: none is)."""
        if not self.enabled:
            return None
        times = [max(since + self.idle_after_s, self._ready.get(us, since))
                 for us, since in self._idle_since.items()
                 if since is not None and us not in self._down]
        return min(times, default=None)
