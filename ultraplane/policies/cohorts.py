"""Hierarchical cohorts: a cohort may have a parent cohort, with quota and weight of its own.

Why: an organisation shares a fleet among its teams, and each team among its queues. With flat
cohorts, either every queue of the organisation lends to every other (one cohort) or teams
lend nothing to each other (one cohort per team). A tree says both: a queue borrows first
within its team's cohort, then from the organisation's, bounded by the limits of every level.
This is Kueue's hierarchical cohorts (its Cohort resource, `spec.parent`), with the
hardware profile as the one flavor (docs/queues.md maps it).

The accounting, per profile, is Kueue's, node by node from the queues up:
- a queue lends `lends` of its nominal chips to its cohort and keeps the rest (`guaranteed`);
  what it holds above the part it keeps is what it uses of its cohort's pool;
- a cohort's subtree quota is its own `nominal` (a pool shared by its members, on top of
  theirs) plus what its queues and child cohorts lend it; it lends its parent all of that, or
  `lending_limit`, and keeps the rest for its subtree; what its subtree uses of its pool above
  the part it keeps is what it uses of its parent's;
- what a cohort has idle for its subtree (`available`) is, at a root, its subtree quota less
  its usage; below, the part it keeps that is unused plus what its parent has idle, the
  latter capped by `borrowing_limit` (how far its subtree may go over its subtree quota).

A cohort no object defines (a queue names it, nothing else) is a root with no quota of its
own: with no parents anywhere, every figure is today's flat cohort's. Parents that form a
cycle are refused (`CohortCycleError`), naming the cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ultraplane.policies.quotas import QueueSpec

__all__ = ["CohortCycleError", "CohortSpec", "CohortTree", "check_parents"]

Used = Callable[[str, str], int]  # (queue, profile) -> chips its running jobs hold


class CohortCycleError(ValueError):
    """Cohort parents that form a cycle; the message names it."""


@dataclass(frozen=True)
class CohortSpec:
    """One cohort's own settings (Kueue: a Cohort). Queues join it by naming it."""

    name: str
    parent: str | None = None
    nominal: Mapping[str, int] = field(default_factory=dict)  # a pool of its own, per profile
    borrowing_limit: int | None = None  # chips its subtree may take over its subtree quota
    lending_limit: int | None = None  # chips of its subtree quota its parent may use
    weight: float = 1.0  # its subtree's weight among its parent's children
    usage_half_life_s: float | None = None  # decay of its queues' usage (`usagedecays`)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a cohort needs a name")
        if self.parent == self.name:
            raise CohortCycleError(f"cohort {self.name} names itself as its parent")
        if any(v < 0 for v in self.nominal.values()):
            raise ValueError(f"cohort {self.name}: nominal chips must be >= 0")
        for what, v in (("borrowing", self.borrowing_limit), ("lending", self.lending_limit)):
            if v is not None and v < 0:
                raise ValueError(f"cohort {self.name}: the {what} limit must be >= 0")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ValueError(f"cohort {self.name}: the fair-share weight must be > 0")
        if self.usage_half_life_s is not None and not (
                self.usage_half_life_s > 0 and math.isfinite(self.usage_half_life_s)):
            raise ValueError(f"cohort {self.name}: the usage half-life must be > 0 seconds")


def check_parents(cohorts: Iterable[CohortSpec]) -> None:
    """Raise `CohortCycleError` when the parents of `cohorts` form a cycle (or a name is
    defined twice: ValueError)."""
    parent: dict[str, str | None] = {}
    for c in cohorts:
        if c.name in parent:
            raise ValueError(f"cohort {c.name!r} is defined twice")
        parent[c.name] = c.parent
    for start in sorted(parent):
        path = [start]
        at = parent.get(start)
        while at is not None:
            if at in path:
                cycle = " -> ".join([*path[path.index(at):], at])
                raise CohortCycleError(f"cohort parents form a cycle: {cycle}; a cohort's "
                                       "parent must not be itself or one of its descendants")
            path.append(at)
            at = parent.get(at)


class CohortTree:
    """The queues' cohorts as a forest, and its accounting (per profile).

    Keys are the book's (`QuotaBook._members`): a cohort's name, or `/queue` for a queue of
    no cohort (a root with that queue alone)."""

    def __init__(self, members: Mapping[str, Sequence[QueueSpec]],
                 cohorts: Iterable[CohortSpec] = ()) -> None:
        cohorts = list(cohorts)
        check_parents(cohorts)
        self.members = members
        self.specs: dict[str, CohortSpec] = {c.name: c for c in cohorts}
        for name in members:
            self.specs.setdefault(name, CohortSpec(name))
        for c in cohorts:  # a parent no object defines is a root with no quota of its own
            if c.parent is not None:
                self.specs.setdefault(c.parent, CohortSpec(c.parent))
        self.children: dict[str, list[str]] = {name: [] for name in self.specs}
        for name in sorted(self.specs):
            parent = self.specs[name].parent
            if parent is not None:
                self.children[parent].append(name)
        self.flat = all(c.parent is None and not any(c.nominal.values())
                        and c.borrowing_limit is None and c.lending_limit is None
                        for c in self.specs.values())

    def root(self, cohort: str) -> str:
        while (parent := self.specs[cohort].parent) is not None:
            cohort = parent
        return cohort

    def ancestors(self, cohort: str) -> list[str]:
        """`cohort` and its ancestors, nearest first."""
        out = [cohort]
        while (parent := self.specs[out[-1]].parent) is not None:
            out.append(parent)
        return out

    def subtree_queues(self, cohort: str) -> list[QueueSpec]:
        out = list(self.members.get(cohort, ()))
        for child in self.children[cohort]:
            out.extend(self.subtree_queues(child))
        return out

    def nominal_total(self, cohort: str) -> int:
        """Chips the subtree's queues and cohorts are nominally given, all profiles."""
        spec = self.specs[cohort]
        return (sum(spec.nominal.values())
                + sum(sum(q.nominal.values()) for q in self.members.get(cohort, ()))
                + sum(self.nominal_total(c) for c in self.children[cohort]))

    # -- accounting on one profile ---------------------------------------------------------
    def quota(self, cohort: str, profile: str) -> int:
        """The subtree quota: its own pool plus what its queues and child cohorts lend it."""
        return (self.specs[cohort].nominal.get(profile, 0)
                + sum(q.lends(profile) for q in self.members.get(cohort, ()))
                + sum(self.lends(c, profile) for c in self.children[cohort]))

    def lends(self, cohort: str, profile: str) -> int:
        quota, limit = self.quota(cohort, profile), self.specs[cohort].lending_limit
        return quota if limit is None else min(quota, limit)

    def usage(self, cohort: str, profile: str, used: Used) -> int:
        """Chips the subtree uses of its pool: each queue's above the part it keeps, each
        child cohort's above the part it keeps."""
        total = sum(max(0, used(q.name, profile) - (q.nominal.get(profile, 0) - q.lends(profile)))
                    for q in self.members.get(cohort, ()))
        for child in self.children[cohort]:
            kept = self.quota(child, profile) - self.lends(child, profile)
            total += max(0, self.usage(child, profile, used) - kept)
        return total

    def available(self, cohort: str, profile: str, used: Used) -> int:
        """Chips idle for the subtree of `cohort`: in its own pool, then up the tree, within
        each level's borrowing limit."""
        spec = self.specs[cohort]
        quota, usage = self.quota(cohort, profile), self.usage(cohort, profile, used)
        if spec.parent is None:
            return quota - usage
        lent = self.lends(cohort, profile)
        kept = quota - lent
        up = self.available(spec.parent, profile, used)
        if spec.borrowing_limit is not None:
            up = min(up, lent - max(0, usage - kept) + spec.borrowing_limit)
        return max(0, kept - usage) + up

    def lent_to(self, mine: str, theirs: str, used: Used, profiles: Iterable[str]) -> bool:
        """Whether the subtree that holds cohort `theirs`, seen from the lowest cohort it
        shares with `mine`, takes more chips than it is given there (it borrows from that
        level, so what `mine`'s queue lent may be in it): reclaim reaches it. Siblings of one
        cohort: always (the queue's own borrowing is checked by the caller)."""
        if self.root(mine) != self.root(theirs):
            return False
        above = set(self.ancestors(mine))
        path = self.ancestors(theirs)
        if path[0] in above:
            return True
        # the child of the lowest shared cohort on `theirs`'s side
        child = next(path[i] for i in range(len(path)) if path[i + 1] in above)
        return any(sum(used(q.name, p) for q in self.subtree_queues(child))
                   > self._given(child, p) for p in profiles)

    def _given(self, cohort: str, profile: str) -> int:
        """Chips the subtree's queues and its own pool are nominally given on `profile`."""
        return (self.specs[cohort].nominal.get(profile, 0)
                + sum(q.nominal.get(profile, 0) for q in self.members.get(cohort, ()))
                + sum(self._given(c, profile) for c in self.children[cohort]))
