"""Power budgets enforced in the scheduling cycle: admission within headroom, caps, status.

Why in the core, consulted by the `Scheduler` like the quota book: a budget is an admission
rule, and every path that gives a job chips (the queue in order, preemption, backfill onto a
reservation, a split that pays) must respect it, so the check sits inside the one cycle, not
in an adapter. The book predicts with `ultraplane.hardware.powermodels`, the model the simulator
charges, so the replay measures what the scheduler predicted.

The rules:
- A budget's predicted draw is the draw of every UltraServer it covers: per chip `standby`
  while the UltraServer is powered down, `idle` while powered, and for each running job its
  predicted draw under its cap. Predicted per chip: `Peak` = peak; `Predicted` = the power
  model at the job's activity and precision with `margin` added to the dynamic part;
  `Measured` = that prediction scaled by the budget's last measured / modelled dynamic draw.
  Under `Predicted` a measurement above the model scales it up too (never down).
- A job is admitted only if every budget covering its chips can hold it: with capping on,
  every running job of its priority or lower may be capped down to its floor (the profile's
  `cap_min_watts`, or an InferenceJob's latency floor) and the new job too; higher-priority
  jobs count uncapped. Otherwise it waits `NoPower`, with the shortfall in the message.
- `caps()` then picks the caps, the lowest priority first (`ultraplane.policies.powercaps`).
- A refused job may reserve headroom for the rest of the cycle (EASY), and one that may preempt
  evicts lower-priority jobs from its short budgets (`ultraplane.policies.headrooms`).
- Power-down (`ultraplane.policies.powerstates`): an UltraServer powered down draws standby; a job
  placed there wakes it (its idle draw counts from then on) and starts after the wake latency.

The book is one object in three modules: here the budgets on the fleet, the jobs it counts,
its predictions, admission and status; caps and headroom reservation are mixins in their own
modules (they are the book's API and are written in its predictions over its jobs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ultraplane.hardware.powermodels import ChipPower, chip_power_of
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.policies.headrooms import NO_POWER, HeadroomReservations
from ultraplane.policies.powerbudgets import BudgetSpec, PowerPolicy, members_of, validate_budgets
from ultraplane.policies.powercaps import PowerCaps
from ultraplane.policies.powerstates import PowerStates

__all__ = ["NO_POWER", "BudgetStatus", "JobPower", "PowerBook"]

DEFAULT_ACTIVITY = 0.9  # a job's utilisation when its adapter does not say (simulator's busy)


@dataclass(frozen=True)
class JobPower:
    """What the adapter knows of a job's draw: activity 0..1, precision, and for an
    InferenceJob the lowest per-chip cap that still meets its latency objective."""

    activity: float = DEFAULT_ACTIVITY
    precision: str = "BF16"
    cap_floor_w: float | None = None


@dataclass(frozen=True)
class BudgetStatus:
    """One budget's figures for a status document (watts)."""

    name: str
    watts: float
    policy: str
    predicted_w: float
    measured_w: float | None
    headroom_w: float
    capped: tuple[tuple[JobKey, float], ...]  # (job, per-chip cap) of capped jobs inside it
    ultraservers: int
    powered_down: int


@dataclass
class _Held:
    key: JobKey
    priority: int
    per_us: dict[str, int]
    power: JobPower
    cap: float | None = None
    capped_since: float | None = None  # when its current run of being capped began


class PowerBook(HeadroomReservations, PowerCaps):
    """Budgets over one fleet; `bind` it to the allocator before the first cycle."""

    def __init__(self, budgets: Sequence[BudgetSpec], *, capping: bool = True,
                 idle_power_down_s: float = 0.0) -> None:
        validate_budgets(budgets)
        self.specs = {b.name: b for b in budgets}
        self.capping = capping
        self.states = PowerStates(idle_power_down_s)
        self._members: dict[str, frozenset[str]] = {}
        self._of_us: dict[str, tuple[str, ...]] = {}
        self._chips: dict[str, int] = {}
        self._chip: dict[str, ChipPower] = {}
        self._jobs: dict[JobKey, _Held] = {}
        self._described: dict[JobKey, JobPower] = {}
        self._scale: dict[str, float] = {}  # budget -> measured / modelled dynamic draw
        self._measured: dict[str, float] = {}
        self._allocator: Allocator | None = None  # the fleet `bind` resolved the budgets on
        self._labels_of: Mapping[str, Mapping[str, str]] | None = None
        self.reserved = None  # this cycle's headroom reservation (`headrooms`)
        # bumped by everything that can move a cap (jobs held or let go, a measurement): a
        # caller may skip `caps()` while it has not moved
        self.changes = 0

    @property
    def active(self) -> bool:
        """Whether any budget exists or UltraServers power down: without either, the cycle
        runs as if there were no book (it still counts what jobs hold)."""
        return bool(self.specs) or self.states.enabled

    def replace(self, budgets: Sequence[BudgetSpec],
                labels_of: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Take a new set of budgets (one was created, edited or deleted), resolved on the
        fleet last bound; what running jobs hold and their caps stay."""
        validate_budgets(budgets)
        self.specs = {b.name: b for b in budgets}
        self._scale = {n: v for n, v in self._scale.items() if n in self.specs}
        self._measured = {n: v for n, v in self._measured.items() if n in self.specs}
        if labels_of is not None:
            self._labels_of = labels_of
        if self._allocator is not None:
            self._resolve(self._allocator)
        self.changes += 1

    # -- the fleet ---------------------------------------------------------------------
    def bind(self, allocator: Allocator,
             labels_of: Mapping[str, Mapping[str, str]] | None = None, now: float = 0.0) -> None:
        """Resolve every budget's UltraServers on the allocator's fleet (every UltraServer
        powered and idle since `now`)."""
        self._allocator, self._labels_of = allocator, labels_of
        self._resolve(allocator)
        topo = allocator.topology
        self.states.bind(self._chips, {us.name: us.profile for us in topo.ultraservers}, now)

    def refleet(self, labels_of: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """The fleet changed (an UltraServer came, went or was relabelled): resolve the
        budgets again, keeping the UltraServers' power states."""
        if labels_of is not None:
            self._labels_of = labels_of
        if self._allocator is not None:
            self._resolve(self._allocator)
            self.changes += 1

    def _resolve(self, allocator: Allocator) -> None:
        labels_of = self._labels_of
        topo = allocator.topology
        validate_budgets(list(self.specs.values()), topo, labels_of)
        self._members = {n: members_of(s, topo, labels_of) for n, s in self.specs.items()}
        self._chips = {us.name: us.chip_count for us in topo.ultraservers}
        self._chip = {us.name: chip_power_of(us.profile) for us in topo.ultraservers}
        of: dict[str, list[str]] = {}
        for name, members in self._members.items():
            for us in members:
                of.setdefault(us, []).append(name)
        self._of_us = {us: tuple(names) for us, names in of.items()}

    def describe(self, key: JobKey, power: JobPower) -> None:
        """The adapter's knowledge of a job's draw (before it is admitted)."""
        self._described[key] = power

    def forget(self, key: JobKey) -> None:
        self._described.pop(key, None)

    # -- predictions ---------------------------------------------------------------------
    def _per_chip(self, budget: BudgetSpec, held: _Held, us: str, cap: float | None) -> float:
        chip = self._chip[us]
        if budget.policy == PowerPolicy.PEAK:
            full = chip.peak
        else:
            busy = chip.busy(held.power.activity, held.power.precision)
            dyn = (busy - chip.idle) * (1.0 + budget.margin) * self._scale.get(budget.name, 1.0)
            full = min(chip.idle + dyn, chip.peak)
        return chip.capped(full, cap)

    def _floor(self, held: _Held, us: str) -> float:
        chip = self._chip[us]
        floor = chip.cap_min
        if held.power.cap_floor_w is not None:
            floor = max(floor, held.power.cap_floor_w)
        return min(floor, chip.peak)

    def _base(self, name: str) -> float:
        """Draw of a budget's UltraServers with no job: idle if powered, standby if not."""
        total = 0.0
        for us in self._members[name]:
            chip = self._chip[us]
            total += self._chips[us] * (chip.standby if self.states.is_down(us) else chip.idle)
        return total

    def _job_draw(self, name: str, held: _Held, cap: float | None) -> float:
        """A job's draw inside budget `name` above the idle floor of its chips."""
        spec, members = self.specs[name], self._members[name]
        out = 0.0
        for us, n in held.per_us.items():
            if us in members:
                out += n * (self._per_chip(spec, held, us, cap) - self._chip[us].idle)
        return out

    def predicted(self, name: str, caps: Mapping[JobKey, float | None] | None = None) -> float:
        """A budget's predicted draw under `caps` (default: the caps in force)."""
        total = self._base(name)
        for held in self._inside(name):
            cap = held.cap if caps is None else caps.get(held.key)
            total += self._job_draw(name, held, cap)
        return total

    def _inside(self, name: str) -> list[_Held]:
        members = self._members[name]
        return [h for h in self._jobs.values() if any(us in members for us in h.per_us)]

    # -- admission -----------------------------------------------------------------------
    def refuse(self, key: JobKey, priority: int, placements: Sequence[Placement],
               end: float | None = None) -> NoFit | None:
        """Why a job placed on `placements` (predicted to end at `end`, if known) does not fit
        its budgets or their reservation (a `NoPower` NoFit), or None. Nothing is recorded:
        the caller holds it with `hold` once admitted."""
        held = self._held(key, priority, placements)
        worst: tuple[float, str] | None = None
        for name in {b for us in held.per_us for b in self._of_us.get(us, ())}:
            need = self._least(name, held)
            over = need - self.specs[name].watts
            if over > 1e-6 and (worst is None or over > worst[0]):
                worst = (over, name)
        if worst is None:
            return self._reserved_for(held, end)
        return NoFit(NO_POWER, f"waiting for {_kw(worst[0])} of headroom in budget {worst[1]} "
                     f"({_kw(self.specs[worst[1]].watts)}, predicted {_kw(self.predicted(worst[1]))}"
                     f" drawn)")

    def short(self, key: JobKey, priority: int, placements: Sequence[Placement]) -> frozenset[str]:
        """The UltraServers of every budget covering `placements` that cannot hold the job
        there (or whose headroom is reserved for another): where not to place it instead."""
        held = self._held(key, priority, placements)
        names = {b for us in held.per_us for b in self._of_us.get(us, ())}
        short = {n for n in names if self._least(n, held) - self.specs[n].watts > 1e-6}
        r = self.reserved
        if r is not None and r.job.key != key:
            short |= r.budgets & names
        return frozenset(us for n in short for us in self._members.get(n, ()))

    def _counted(self, name: str, held: _Held, new: _Held) -> float:
        """What a running job adds to `_least(name, new)`."""
        if self.capping and held.priority <= new.priority:
            return self._at_floor(name, held)
        return self._job_draw(name, held, None)

    def _least(self, name: str, new: _Held, *, alone: bool = False) -> float:
        """The lowest predicted draw of budget `name` with `new` admitted: every job of its
        priority or lower at its floor (with capping), the rest as they are, wakes counted
        (`alone`: as if no other job ran)."""
        total = self._base(name)
        members = self._members[name]
        for us in new.per_us:
            if us in members and self.states.is_down(us):
                chip = self._chip[us]
                total += self._chips[us] * (chip.idle - chip.standby)
        for held in [*([] if alone else self._inside(name)), new]:
            total += self._counted(name, held, new)
        return total

    def _at_floor(self, name: str, held: _Held) -> float:
        spec, members = self.specs[name], self._members[name]
        return sum(n * (self._per_chip(spec, held, us, self._floor(held, us)) - self._chip[us].idle)
                   for us, n in held.per_us.items() if us in members)

    def _held(self, key: JobKey, priority: int, placements: Sequence[Placement]) -> _Held:
        per_us: dict[str, int] = {}
        for p in placements:
            for us, n in p.chips_by_ultraserver:
                per_us[us] = per_us.get(us, 0) + n
        return _Held(key, priority, per_us, self._described.get(key, JobPower()))

    def hold(self, key: JobKey, priority: int, placements: Sequence[Placement],
             now: float | None) -> None:
        """A job was admitted (or re-adopted) on `placements`: count it, wake its UltraServers."""
        held = self._held(key, priority, placements)
        old = self._jobs.get(key)
        if old is not None:
            held.cap = old.cap
        reserved = self.reserved
        if reserved is not None:  # admitted onto headroom spare at the reservation's start
            for name, watts in reserved.taking.pop(key, {}).items():
                reserved.spare[name] -= watts
        self._jobs[key] = held
        self.changes += 1
        for us in held.per_us:
            self.states.busy(us, now)

    def unhold(self, key: JobKey, now: float | None) -> None:
        held = self._jobs.pop(key, None)
        if held is None:
            return
        self.changes += 1
        still = {us for h in self._jobs.values() for us in h.per_us}
        for us in held.per_us:
            if us not in still:
                self.states.idle(us, now)

    # -- measurements and status ---------------------------------------------------------
    def measure(self, watts_of: Mapping[str, float]) -> None:
        """The adapter's measured draw per UltraServer (simulator telemetry or the nodes')."""
        self.changes += 1
        for name, members in self._members.items():
            measured = sum(watts_of.get(us, 0.0) for us in members)
            self._measured[name] = measured
            spec = self.specs[name]
            base = self._base(name)
            self._scale[name] = 1.0
            model = self.predicted(name) - base
            if model <= 0:
                continue
            ratio = max(measured - base, 0.0) / (model / (1.0 + spec.margin))
            if spec.policy == PowerPolicy.MEASURED:
                self._scale[name] = max(ratio, 0.5)
            elif spec.policy == PowerPolicy.PREDICTED and ratio > 1.0:
                self._scale[name] = ratio

    def status(self) -> list[BudgetStatus]:
        """Every budget's predicted and measured draw, headroom and capped jobs."""
        out: list[BudgetStatus] = []
        for name, spec in self.specs.items():
            members = self._members.get(name, frozenset())
            predicted = self.predicted(name) if self._members else 0.0
            capped = tuple((h.key, h.cap) for h in self._inside(name) if h.cap is not None)
            out.append(BudgetStatus(
                name, spec.watts, spec.policy.value, predicted, self._measured.get(name),
                spec.watts - predicted, capped, len(members),
                sum(1 for us in members if self.states.is_down(us))))
        return out

    def members(self, name: str) -> frozenset[str]:
        """The UltraServers budget `name` covers (after `bind`)."""
        return self._members.get(name, frozenset())

    def budgets_of(self, ultraservers: Iterable[str]) -> list[str]:
        return sorted({b for us in ultraservers for b in self._of_us.get(us, ())})


def _kw(watts: float) -> str:
    return f"{watts / 1e3:,.1f} kW" if abs(watts) < 1e6 else f"{watts / 1e6:,.2f} MW"
