"""The services of a replay, held in the same Scheduler as its training jobs.

Why through the one cycle: a service's replicas are chips the training queue cannot have,
and a scale-up may have to take them back. So each service is an elastic replicated job
(`QueuedJob(replicas=n)`) submitted to the replay's `Admissions` at its start: its first
replicas are admitted like any job, its policy's counts go in as `Admissions.rescale`
(scale-downs free chips for the queue at once; scale-ups are placed by the next cycle as
new gangs in one domain each, preempting lower-priority preemptible training with the
reason said on the victim), and it is withdrawn when it ends. The replay executes what the
cycle decided and calls this side for what concerns a service (like `powerside`).

Every `services.WINDOW_S` each service prices its last window (`Service.serve_window`),
its draw over idle goes into the fleet's ledger, and its policy may ask for another count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ultraplane.simulator.events import SUBMIT, TICK, Event
from ultraplane.simulator.fleets import chips_per_ultraserver
from ultraplane.simulator.services import WINDOW_S, Service

from ultraplane.ids import JobKey
from ultraplane.placement.placements import request_from_topology
from ultraplane.scheduling.decisions import Admitted, ScaledDown, ScaledUp
from ultraplane.workloads import QueuedJob

if TYPE_CHECKING:
    from ultraplane.simulator.replay import Replay

__all__ = ["InferenceSide"]


class InferenceSide:
    """The services of one replay (one policy), and what the replay asks of them."""

    def __init__(self, replay: Replay, services: Sequence[Service]) -> None:
        self.replay = replay
        self.services = {s.key: s for s in services}
        self.wanted: dict[JobKey, int] = {}  # the count last asked of the cycle
        self.running: set[JobKey] = set()
        self.ended: set[JobKey] = set()
        self._growing: set[JobKey] = set()
        self._shown: dict[JobKey, float] = {}  # each service's draw over idle in the ledger

    def owns(self, key: str) -> bool:
        return key in self.services

    @property
    def active(self) -> bool:
        """Whether a service has not ended yet."""
        return len(self.ended) < len(self.services)

    def wants_cycle(self) -> bool:
        """A scale-up or a first admission waits for the cycle."""
        return bool(self._growing) or any(
            k not in self.running and k not in self.ended and k in self.wanted
            for k in self.services)

    def start(self) -> None:
        eng = self.replay.engine
        for s in self.services.values():
            eng.schedule(s.start_s, SUBMIT, Event("service", s.key))
            eng.schedule(s.start_s + WINDOW_S, TICK, Event("service-window", s.key))

    # -- events -----------------------------------------------------------------------
    def handle(self, ev: object, t: float) -> bool:
        """A service starts, or one of its windows ends; True when the cycle should run."""
        assert isinstance(ev, Event)
        s = self.services[ev.payload]
        if ev.kind == "service":
            return self._submit(s)
        s.serve_window(t)
        self._draw(s)
        if t + WINDOW_S <= s.end_s + 1e-9:
            self.replay.engine.schedule(t + WINDOW_S, TICK, Event("service-window", s.key))
        if t >= s.end_s - 1e-9:
            self._end(s)
            return True
        if s.key not in self.running:
            return False
        want = s.decide(t, self.wanted[s.key])
        if want != self.wanted[s.key]:
            return self._rescale(s, want, t)
        return bool(self._growing)

    def _submit(self, s: Service) -> bool:
        request = request_from_topology(s.spec.chips_per_replica, None)
        adm = self.replay.admissions
        job = adm.ranked(QueuedJob(s.key, request, s.spec.priority, -1 - len(self.wanted),
                                   preemptible=s.spec.preemptible, replicas=s.initial,
                                   expected_s=float(s.spec.duration_seconds),
                                   created_s=s.start_s))
        self.wanted[s.key] = s.initial
        adm.submit(job)
        self.replay._running_n += 1
        return True

    def _rescale(self, s: Service, want: int, t: float) -> bool:
        old = self.wanted[s.key]
        self.wanted[s.key] = want
        for i in range(old, want):
            s.asked.setdefault(i, t)
        got = self.replay.admissions.rescale(s.key, want, s.reason)
        if isinstance(got, ScaledDown):
            self._growing.discard(s.key)
            held = s.held
            self._release(s, s.shrunk(want))
            s.extra_w *= s.held / held if held else 0.0
            self._draw(s)
            return True
        self._growing.add(s.key)
        return True

    def _end(self, s: Service) -> None:
        if s.key in self.ended:
            return
        self.ended.add(s.key)
        self._growing.discard(s.key)
        self.replay.admissions.withdraw(s.key)
        self._release(s, s.lost())
        s.extra_w = 0.0
        self._draw(s)
        self.running.discard(s.key)
        self.replay._running_n -= 1
        self.replay._done()

    # -- what the cycle decided ---------------------------------------------------------
    def admitted(self, a: Admitted, t: float) -> None:
        s = self.services[a.key]
        self.running.add(s.key)
        warm = not s.figures.t  # the first admission: a warm service
        for i, p in enumerate(a.placements):
            self._hold(s, i, p.chip_ids, t, warm=warm)

    def scaled_up(self, up: ScaledUp, t: float) -> None:
        s = self.services[up.key]
        for i, p in up.added:
            self._hold(s, i, p.chip_ids, t, warm=False)
        if up.replicas >= up.desired:
            self._growing.discard(s.key)

    def preempted(self, key: str) -> None:
        """The whole service lost its chips to a higher priority: it waits again."""
        s = self.services[JobKey(key)]
        self.running.discard(s.key)
        self._growing.discard(s.key)
        self._release(s, s.lost())
        self._draw(s)

    # -- the fleet's ledger -------------------------------------------------------------
    def _hold(self, s: Service, index: int, chips: Sequence[str], t: float, *,
              warm: bool) -> None:
        per_us = chips_per_ultraserver(chips)
        self.replay.ledger.occupy(per_us, 0.0, +1)
        s.placed(index, per_us, t, warm=warm)
        us = len(per_us)
        self.replay.result.placements.append((f"{s.key}#{index}", t, "start", tuple(chips)))
        if us > 1:
            self.replay.result.inference_splits += 1

    def _release(self, s: Service, gone: Sequence[dict[str, int]]) -> None:
        for per_us in gone:
            if per_us:
                self.replay.ledger.occupy(per_us, 0.0, -1)

    def _draw(self, s: Service) -> None:
        """The service's draw over idle, as the fleet's ledger holds it."""
        shown = self._shown.get(s.key, 0.0)
        self.replay.ledger.adjust(s.extra_w - shown)
        self._shown[s.key] = s.extra_w
