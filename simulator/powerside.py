"""The replay's power side: budgets, caps and power-down executed in simulated time.

Why apart from the replay loop: the core decides (admission within headroom, which job is
capped to what, which UltraServer powers down: `ultraplane.policies.powerbook`); this module only
executes those decisions on the simulated fleet and measures what they cost, so the loop
stays about jobs. It keeps the fleet's idle floor (idle chips on powered UltraServers,
standby on powered-down ones), applies caps to running jobs (their draw, and their speed
from the profile's perf-vs-power curve), integrates energy split into idle, active and
capped, measures each budget's draw against its limit, and writes the rows of power.csv.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ultraplane.simulator.fleets import FleetShape, Ledger

from ultraplane.hardware.powermodels import ChipPower, chip_power_of
from ultraplane.ids import JobKey
from ultraplane.policies.powerbook import JobPower, PowerBook
from ultraplane.policies.powerbudgets import BudgetSpec, PowerPolicy


@dataclass
class PowerFigures:
    """What a replay under budgets measured (summary.json's power keys come from here)."""

    budgets: list[tuple[str, float]] = field(default_factory=list)  # (name, watts)
    seconds_over_budget: float = 0.0
    largest_excess_w: float = 0.0
    energy_idle_j: float = 0.0  # idle floor of powered chips, standby of powered-down ones
    energy_capped_j: float = 0.0  # dynamic energy drawn by jobs while capped
    capped_chip_s: float = 0.0
    powered_down_us_s: float = 0.0  # UltraServer-seconds powered down
    wakes: int = 0
    rows: list[tuple[float, float, tuple[float, ...]]] = field(default_factory=list)


class PowerSide:
    """One replay's budgets and power states (see the module docstring)."""

    def __init__(self, budgets: Sequence[BudgetSpec], shape: FleetShape, ledger: Ledger, *,
                 capping: bool, idle_power_down_s: float) -> None:
        self.book = PowerBook(budgets, capping=capping, idle_power_down_s=idle_power_down_s)
        self.shape, self.ledger = shape, ledger
        self.figures = PowerFigures(budgets=[(b.name, float(b.watts)) for b in budgets])
        self._chip: dict[str, ChipPower] = {}
        self.fleetwide = all(b.whole_fleet for b in budgets)
        self.measuring = any(b.policy == PowerPolicy.MEASURED for b in budgets)
        self._t = ledger.t
        self._last_row: tuple[float, tuple[float, ...]] | None = None

    def bind(self, allocator: Any, now: float) -> None:
        self.book.bind(allocator, now=now)
        self._chip = {n: chip_power_of(p) for n, p in self._profiles(allocator).items()}

    @staticmethod
    def _profiles(allocator: Any) -> dict[str, str]:
        return {us.name: us.profile for us in allocator.topology.ultraservers}

    # -- jobs ----------------------------------------------------------------------------
    def describe(self, key: str, kind: str, precision: str, activity: float) -> None:
        """What the scheduler predicts a job with. An inference job's latency objective is
        not in a trace, so it is never capped below its predicted draw (it always holds)."""
        floor = None
        if kind != "training":
            floor = max(c.busy(activity, precision) for c in self._chip.values())
        self.book.describe(JobKey(key), JobPower(activity, precision, floor))

    def wake_delay(self, ultraservers: Iterable[str], t: float) -> float:
        ready = [self.book.states.ready_at(us) for us in ultraservers]
        return max([r - t for r in ready if r is not None] + [0.0])

    def speed_and_extra(self, per_us: Mapping[str, int], busy_w: Mapping[str, float],
                        cap: float | None) -> tuple[float, float]:
        """(speed share, watts over idle) of a job drawing `busy_w` per chip under `cap`."""
        speed, extra = 1.0, 0.0
        for us, n in per_us.items():
            chip = self._chip[us]
            speed = min(speed, chip.speed(busy_w[us], cap))
            extra += n * (chip.capped(busy_w[us], cap) - chip.idle)
        return speed, extra

    # -- time ----------------------------------------------------------------------------
    def advance(self, t: float, capped_chips: int, capped_extra_w: float) -> None:
        """Integrate up to `t` (the ledger has been advanced to `t` already)."""
        dt = t - self._t
        if dt <= 0:
            return
        f = self.figures
        f.energy_idle_j += self._floor() * dt
        # what the caller passes held since the last instant (nothing changes between two)
        f.capped_chip_s += capped_chips * dt
        f.energy_capped_j += capped_extra_w * dt
        f.powered_down_us_s += len(self.book.states.down()) * dt
        if self._last_row is not None:
            over = max((drawn - watts for (_, watts), drawn
                        in zip(f.budgets, self._last_row[1], strict=True)), default=0.0)
            if over > 1e-6:  # any budget exceeded: the time counts once
                f.seconds_over_budget += dt
                f.largest_excess_w = max(f.largest_excess_w, over)
        self._t = t

    def _floor(self) -> float:
        down = self.book.states.down()
        return sum(self.shape.chips_of[n] * (self._chip[n].standby if n in down
                                             else self._chip[n].idle)
                   for n in self.shape.names)

    def states_changed(self, before: frozenset[str], t: float) -> None:
        """Charge wakes (UltraServers in `before` no longer down) and power down what is due."""
        after = self.book.states.down()
        for us in before - after:
            self.ledger.adjust(self._gap(us))
            self.figures.wakes += 1
        for us in self.book.states.due(t):
            self.ledger.adjust(-self._gap(us))

    def _gap(self, us: str) -> float:
        chip = self._chip[us]
        return self.shape.chips_of[us] * (chip.idle - chip.standby)

    def record(self, t: float, budget_draw: Sequence[float]) -> None:
        """A power.csv row when the draw changed."""
        row = (self.ledger.power_w, tuple(budget_draw))
        if self._last_row is not None and self._last_row == row:
            return
        self._last_row = row
        self.figures.rows.append((t, row[0], row[1]))

    def measure(self, extra_of_us: Mapping[str, float]) -> None:
        """Hand the book each UltraServer's drawn watts (the simulator's chip telemetry)."""
        down = self.book.states.down()
        self.book.measure({
            us: self.shape.chips_of[us] * (self._chip[us].standby if us in down
                                           else self._chip[us].idle) + extra_of_us.get(us, 0.0)
            for us in self.shape.names})

    def budget_draw(self, extra_of_us: Mapping[str, float]) -> list[float]:
        """Each budget's measured draw: its UltraServers' floor plus jobs' draw over idle."""
        if self.fleetwide:
            return [self.ledger.power_w] * len(self.figures.budgets)
        down = self.book.states.down()
        out = []
        for name, _ in self.figures.budgets:
            members = self.book.members(name)
            total = 0.0
            for us in members:
                chip = self._chip[us]
                total += self.shape.chips_of[us] * (chip.standby if us in down else chip.idle)
                total += extra_of_us.get(us, 0.0)
            out.append(total)
        return out


def peak_provisioned(topology: Any, budgets: Sequence[BudgetSpec]) -> Any | None:
    """The provision-for-peak baseline of one fleet-wide budget: the fleet's first UltraServers,
    as many as the budget holds with every chip at peak (the rest are off), or None when the
    budgets are not one fleet-wide budget or not even one UltraServer fits."""
    from ultraplane.hardware.topology import Topology

    if len(budgets) != 1 or not budgets[0].whole_fleet:
        return None
    kept, drawn = [], 0.0
    for us in topology.ultraservers:
        peak = chip_power_of(us.profile).peak * us.chip_count
        if drawn + peak > budgets[0].watts:
            break
        kept.append(us)
        drawn += peak
    return Topology.of(kept) if kept else None
