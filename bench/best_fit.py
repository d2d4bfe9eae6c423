"""A second baseline: Kueue-style BestFit ("least free capacity" that still fits).

Same constraints and chip order as `first_fit.FirstFit`; only the choice of domain differs: a
gang up to one UltraServer goes to the UltraServer with the fewest free chips that can hold it
(lowest id on a tie), and a larger gang to the network block with the fewest idle UltraServers
that still has enough (lowest id on a tie). This is how Kueue's topology-aware scheduling
picks a domain under its BestFit / LeastFreeCapacity profiles; the issue names it as the level
to beat.
"""

from __future__ import annotations

import numpy as np
from first_fit import FirstFit


class BestFit(FirstFit):
    def _ultraserver(self, chips: int) -> int | None:
        free = np.where(self.free >= chips, self.free, self.cpu + 1)
        u = int(np.argmin(free))
        return u if free[u] <= self.cpu else None

    def _block(self, k: int) -> int | None:
        idle = self.free == self.cpu
        counts = np.bincount(self.block[idle], minlength=self.blocks)
        counts = np.where(counts >= k, counts, np.iinfo(np.int64).max)
        b = int(np.argmin(counts))
        return b if counts[b] != np.iinfo(np.int64).max else None
