"""Power budgets: watts over a set of UltraServers, nested like a data centre's power delivery.

Why a spec of its own, apart from the book that enforces it: the adapters (a cluster-scoped
resource, the REST API, the simulator's `--power-budget`) read budgets from different places
but must mean the same thing by them, so the validation lives once, here (the reading of a
PowerBudget's spec or a budgets file is `ultraplane.policies.budgetdocuments`), and
`ultraplane.policies.powerbook` only ever sees valid, resolved budgets.

A budget covers the UltraServers it selects: named ones, those in given network blocks (an
UltraServer's `network` names), those carrying given labels (the adapter supplies each
UltraServer's labels), or, with no selector, the whole fleet. A `parent` budget must cover
every UltraServer of its children (a facility, then its rows, then single UltraServers).
`policy` says how the book predicts a budget's draw (`PowerPolicy`), `margin` the safety
margin it adds to the predicted (or measured) dynamic draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ultraplane.hardware.topology import Topology

__all__ = ["BudgetConflict", "BudgetSpec", "PowerPolicy", "members_of", "validate_budgets"]


class PowerPolicy(StrEnum):
    """How a budget's draw is predicted at admission."""

    PEAK = "Peak"  # every chip of every running job at peak: safe and wasteful
    PREDICTED = "Predicted"  # the power model at each job's activity and precision, plus margin
    MEASURED = "Measured"  # the last measured draw plus margin, plus jobs admitted since


@dataclass(frozen=True)
class BudgetSpec:
    """One budget. `watts` is the limit on the draw of every UltraServer it covers."""

    name: str
    watts: float
    ultraservers: tuple[str, ...] | None = None
    blocks: tuple[str, ...] | None = None
    labels: Mapping[str, str] | None = field(default=None, hash=False)
    parent: str | None = None
    policy: PowerPolicy = PowerPolicy.PREDICTED
    margin: float = 0.05  # share added to the predicted dynamic draw (Predicted, Measured)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a power budget needs a name")
        if isinstance(self.watts, bool) or not isinstance(self.watts, int | float) \
                or not self.watts > 0:
            raise ValueError(f"power budget {self.name}: watts must be a positive number, "
                             f"got {self.watts!r}")
        try:
            object.__setattr__(self, "policy", PowerPolicy(self.policy))
        except ValueError:
            known = ", ".join(p.value for p in PowerPolicy)
            raise ValueError(f"power budget {self.name}: policy must be one of {known}, "
                             f"got {self.policy!r}") from None
        if not 0 <= self.margin <= 1:
            raise ValueError(f"power budget {self.name}: margin must be in 0..1, "
                             f"got {self.margin!r}")

    @property
    def whole_fleet(self) -> bool:
        return self.ultraservers is None and self.blocks is None and not self.labels


class BudgetConflict(ValueError):
    """A budget that cannot be used with the others (named twice, an unknown parent, a
    cycle, a child covering an UltraServer its parent does not); `budget` names it."""

    def __init__(self, budget: str, message: str) -> None:
        super().__init__(message)
        self.budget = budget


def members_of(spec: BudgetSpec, topology: Topology,
               labels_of: Mapping[str, Mapping[str, str]] | None = None) -> frozenset[str]:
    """The UltraServers `spec` covers in `topology` (every selector given must match)."""
    out: list[str] = []
    for us in topology.ultraservers:
        if spec.ultraservers is not None and us.name not in spec.ultraservers:
            continue
        if spec.blocks is not None and not set(us.network) & set(spec.blocks):
            continue
        if spec.labels:
            have = (labels_of or {}).get(us.name, {})
            if any(have.get(k) != v for k, v in spec.labels.items()):
                continue
        out.append(us.name)
    return frozenset(out)


def validate_budgets(specs: Sequence[BudgetSpec], topology: Topology | None = None,
                     labels_of: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Raise BudgetConflict (one sentence, naming the budget) for duplicate names, an unknown
    parent, a parent cycle, or (with a topology) a child covering an UltraServer its parent
    does not."""
    names = [s.name for s in specs]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise BudgetConflict(n, f"power budget {n} is defined twice")
        seen.add(n)
    by_name = {s.name: s for s in specs}
    for s in specs:
        chain, at = [s.name], s.parent
        while at is not None:
            if at not in by_name:
                raise BudgetConflict(s.name, f"power budget {s.name}: parent {at} is not a budget")
            if at in chain:
                raise BudgetConflict(s.name, f"power budgets {' -> '.join([*chain, at])} form a "
                                               "cycle")
            chain.append(at)
            at = by_name[at].parent
    if topology is None:
        return
    for s in specs:
        if s.parent is None:
            continue
        outside = members_of(s, topology, labels_of) - members_of(by_name[s.parent], topology,
                                                                  labels_of)
        if outside:
            raise BudgetConflict(s.name, f"power budget {s.name} covers {sorted(outside)[0]}, "
                                         f"which its parent {s.parent} does not")
