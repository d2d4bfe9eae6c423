"""A fair share that remembers: each queue's recent usage, decayed with a half-life.

Why: fair shares and borrowing order look at what queues hold now. A queue that held the
idle chips of its cohort all week, and gave them back an hour ago, would borrow again first
the moment chips come free, ahead of a queue that has had nothing. As KAI's and Slurm's fair
share do, a cohort may remember (`CohortSpec.usage_half_life_s`, off by default): each of its
queues' chip-seconds, halved every half-life, lowers the queue's place among borrowers (the
book's `arrange`) and puts its jobs first among fair-sharing victims, both by decayed usage
over weight.

Driven by the caller's clock: `advance(now)` at each full cycle adds what each queue held
since the last call and decays the rest. The book learns of ends without a time, so a job
counts until the first cycle after it ended: never less than it held, at most the time
between two cycles more. Without a clock, or without a half-life on a
queue's cohort or any of its ancestors, the figure stays 0 and nothing changes.

Why a mixin of `QuotaBook`: like the ledger (`ultraplane.policies.queueusages`) it reads the
book's queues, tree and usage, and the book's `arrange` reads it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ultraplane.policies.cohorts import CohortTree
    from ultraplane.policies.quotas import QueueSpec, _Arranged

__all__ = ["UsageDecay"]


class UsageDecay:
    """The quota book's decayed usage per queue (fields declared on `QuotaBook`)."""

    queues: dict[str, QueueSpec]
    tree: CohortTree
    _decayed: dict[str, float]  # queue -> decayed chip-seconds
    _decayed_at: float | None
    _released: dict[str, int]  # queue -> chips released since the last `advance`
    _arranged: _Arranged | None

    if TYPE_CHECKING:  # the ledger's, `ultraplane.policies.queueusages`
        def used(self, queue: str, profile: str | None = None) -> int: ...

    def half_life(self, spec: QueueSpec) -> float | None:
        """The usage half-life of `spec`'s queue: its nearest cohort's that sets one."""
        if spec.cohort is None:
            return None
        for cohort in self.tree.ancestors(spec.cohort):
            half = self.tree.specs[cohort].usage_half_life_s
            if half is not None:
                return half
        return None

    def advance(self, now: float) -> None:
        """Decay every remembering queue's usage to `now`, adding the chips it holds over
        the time since the last call (the first call only starts the clock)."""
        last, self._decayed_at = self._decayed_at, now
        released, self._released = self._released, {}
        if last is None or now <= last:
            return
        moved = False
        for name, spec in self.queues.items():
            half = self.half_life(spec)
            if half is None:
                continue
            keep = 2.0 ** (-(now - last) / half)
            # chips held over the interval, each chip-second decayed by its age
            self._decayed[name] = (self._decayed.get(name, 0.0) * keep
                                   + (self.used(name) + released.get(name, 0))
                                   * half / math.log(2) * (1.0 - keep))
            moved = True
        if moved:  # the borrowers' order moved without usage moving
            self._arranged = None

    def decayed_usage(self, queue: str) -> float:
        """`queue`'s decayed chip-seconds (0 without a half-life)."""
        return self._decayed.get(queue, 0.0)

    def recent_chips(self, queue: str) -> float:
        """`queue`'s decayed usage as chips held on average (chip-seconds over the mean age
        a half-life gives, half-life / ln 2): comparable with chips borrowed; 0 without a
        half-life."""
        spec = self.queues.get(queue)
        half = self.half_life(spec) if spec is not None else None
        if half is None:
            return 0.0
        return self._decayed.get(queue, 0.0) * math.log(2) / half
