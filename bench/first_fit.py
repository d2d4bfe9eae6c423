"""The benchmark's baseline: a plain first-fit gang allocator (not the core's "first-fit" policy).

Same constraints as the workload gives the core (a gang up to one UltraServer stays inside one
UltraServer; a larger gang takes whole idle UltraServers inside one network block), but every
choice is "the first one in id order": the first UltraServer with enough free chips, the lowest
free chips inside it, the first block with enough idle UltraServers. Free counts live in a numpy
array so the scan is fast; the point of comparison is fragmentation, not Python speed.
"""

from __future__ import annotations

import numpy as np


class FirstFit:
    def __init__(self, ultraservers: int, *, servers: int = 36, chips_per_server: int = 4,
                 per_block: int = 16) -> None:
        self.servers, self.cps = servers, chips_per_server
        self.cpu = servers * chips_per_server
        self.full = (1 << chips_per_server) - 1
        self.free = np.full(ultraservers, self.cpu, dtype=np.int32)
        self.masks = [[self.full] * servers for _ in range(ultraservers)]
        self.block = np.arange(ultraservers) // per_block
        self.blocks = int(self.block[-1]) + 1
        self.jobs: dict[str, list[tuple[int, int, int]]] = {}

    def _ultraserver(self, chips: int) -> int | None:
        """The UltraServer a gang of up to one UltraServer goes to: the first that fits."""
        fits = self.free >= chips
        u = int(np.argmax(fits))
        return u if fits[u] else None

    def _block(self, k: int) -> int | None:
        """The block a gang of k whole UltraServers goes to: the first with k idle ones."""
        idle = self.free == self.cpu
        ok = np.bincount(self.block[idle], minlength=self.blocks) >= k
        b = int(np.argmax(ok))
        return b if ok[b] else None

    def allocate(self, job: str, chips: int) -> bool:
        if chips <= self.cpu:
            u = self._ultraserver(chips)
            if u is None:
                return False
            parts, left, masks = [], chips, self.masks[u]
            for s in range(self.servers):
                m = masks[s]
                while m and left:
                    bit = m & -m
                    m ^= bit
                    left -= 1
                    parts.append((u, s, bit))
                if not left:
                    break
            self._take(job, parts)
            return True
        k = -(-chips // self.cpu)
        b = self._block(k)
        if b is None:
            return False
        chosen = np.flatnonzero((self.free == self.cpu) & (self.block == b))[:k]
        parts, left = [], chips
        for u in chosen.tolist():
            for s in range(self.servers):
                if left <= 0:
                    break
                take = min(left, self.cps)
                parts.append((u, s, (1 << take) - 1))
                left -= take
        self._take(job, parts)
        return True

    def _take(self, job: str, parts: list[tuple[int, int, int]]) -> None:
        for u, s, m in parts:
            self.masks[u][s] &= ~m
            self.free[u] -= m.bit_count()
        self.jobs[job] = parts

    def release(self, job: str) -> None:
        for u, s, m in self.jobs.pop(job):
            self.masks[u][s] |= m
            self.free[u] += m.bit_count()
