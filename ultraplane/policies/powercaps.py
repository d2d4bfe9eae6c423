"""Power caps: per running job, the per-chip cap that keeps every budget within its watts.

The rule: per budget over its limit, the lowest priority first, one cap level (a share of peak)
for all jobs of a priority, as high as the budget allows. A higher priority is touched only
once every lower one is at its floor (the profile's `cap_min_watts`, or an InferenceJob's
latency floor).

Why apart from admission (`ultraplane.policies.powerbook`): admission asks whether a job could
fit with every job of its priority or lower at its floor; this picks the caps that are actually
set once jobs run, a search of its own (bisection over a share of peak) that admission never
needs. The caps it keeps are then what `predicted` and `status` report.

Why a mixin of `PowerBook` and not an object it holds: the adapters call `caps`, `cap_of` and
`capped_for` on the book, and the caps are kept on the book's own records of running jobs;
held, it would reach back into the book's jobs and predictions for each of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultraplane.hardware.powermodels import ChipPower
from ultraplane.ids import JobKey
from ultraplane.policies.powerbudgets import BudgetSpec

if TYPE_CHECKING:
    from ultraplane.policies.powerbook import _Held

__all__ = ["PowerCaps"]


class PowerCaps:
    """The power book's caps: chosen per budget, kept per running job."""

    # the book's state (`ultraplane.policies.powerbook`)
    specs: dict[str, BudgetSpec]
    _members: dict[str, frozenset[str]]
    _chip: dict[str, ChipPower]
    _jobs: dict[JobKey, _Held]

    if TYPE_CHECKING:  # the book's predictions, from `ultraplane.policies.powerbook`
        def _base(self, name: str) -> float: ...
        def _inside(self, name: str) -> list[_Held]: ...
        def _floor(self, held: _Held, us: str) -> float: ...
        def _per_chip(self, budget: BudgetSpec, held: _Held, us: str,
                      cap: float | None) -> float: ...

    def caps(self, now: float | None = None) -> dict[JobKey, float | None]:
        """Per running job, its per-chip cap (None: uncapped), chosen so every budget's
        predicted draw is within it where capping can make it so (see the module docstring).
        The caps are kept: `predicted` and `status` use them; `now` (the caller's clock)
        starts a job's `capped_for` when it is first capped."""
        caps: dict[JobKey, float | None] = dict.fromkeys(self._jobs)
        for name in sorted(self.specs, key=lambda n: len(self._members.get(n, ()))):
            spec, members = self.specs[name], self._members[name]
            room = spec.watts - self._base(name)
            inside = self._inside(name)
            # per job: (chips, uncapped per chip, floor, idle, cap_min, peak) on each member
            rows = {h.key: [(n, self._per_chip(spec, h, us, None), self._floor(h, us),
                             self._chip[us].idle, self._chip[us].cap_min, self._chip[us].peak)
                            for us, n in h.per_us.items() if us in members] for h in inside}
            draws = {h.key: _draw(rows[h.key], caps[h.key]) for h in inside}
            if sum(draws.values()) <= room:
                continue
            for priority in sorted({h.priority for h in inside}):
                group = [h for h in inside if h.priority == priority]
                keys = {h.key for h in group}
                others = sum(d for k, d in draws.items() if k not in keys)
                # per job: (key, peak, floor, current cap, rows), so a trial share costs one pass
                shape = [(h.key, self._chip[next(iter(h.per_us))].peak,
                          self._floor(h, next(iter(h.per_us))), caps[h.key], rows[h.key])
                         for h in group]

                def at(share: float, shape: list[_Shape] = shape) -> dict[JobKey, float | None]:
                    out: dict[JobKey, float | None] = {}
                    for key, peak, floor, current, _ in shape:
                        cap = max(share * peak, floor)
                        if current is not None and current < cap:
                            cap = current
                        out[key] = None if cap >= peak else cap
                    return out

                def total(share: float, shape: list[_Shape] = shape) -> float:
                    return sum(_draw(r, c) for r, c in zip((s[4] for s in shape),
                                                           at(share).values(), strict=True))

                if others + total(0.0) > room:  # all of this priority at its floor, next up
                    floor = at(0.0)
                    caps.update(floor)
                    draws.update({k: _draw(rows[k], c) for k, c in floor.items()})
                    continue
                lo, hi = 0.0, 1.0  # share of peak: fits at lo, not at hi
                for _ in range(16):
                    mid = (lo + hi) / 2
                    if others + total(mid) <= room:
                        lo = mid
                    else:
                        hi = mid
                caps.update(at(lo))
                break
        for key, held in self._jobs.items():
            if caps[key] is None:
                held.capped_since = None
            elif held.cap is None:
                held.capped_since = now
            held.cap = caps[key]
        return caps

    def cap_of(self, key: JobKey) -> float | None:
        """A running job's per-chip cap in watts (None: uncapped or not running)."""
        held = self._jobs.get(key)
        return None if held is None else held.cap

    def capped_for(self, key: JobKey, now: float) -> float | None:
        """Seconds a running job has been capped without a break (None: it is not capped,
        or no clock was given when it was)."""
        held = self._jobs.get(key)
        if held is None or held.cap is None or held.capped_since is None:
            return None
        return now - held.capped_since


_Row = tuple[int, float, float, float, float, float]  # chips, full, floor, idle, cap_min, peak
_Shape = tuple[JobKey, float, float, float | None, list[_Row]]


def _draw(rows: list[tuple[int, float, float, float, float, float]], cap: float | None) -> float:
    """A job's draw over idle from its per-UltraServer rows under `cap` (as ChipPower.capped)."""
    if cap is None:
        return sum(n * (full - idle) for n, full, _, idle, _, _ in rows)
    return sum(n * (min(full, min(max(cap, lo), peak)) - idle)
               for n, full, _, idle, lo, peak in rows)
