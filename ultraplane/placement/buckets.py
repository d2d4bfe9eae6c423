"""A pool's rank buckets: slots filed by (most free chips in one domain, rank), as bitmasks.

Why apart from the pool's re-filing (`Pool` in `ultraplane.placement.slots`): the buckets answer
"the lowest-ranked slot with a domain of >= c free chips" in a few integer operations, and that
answer depends only on how slots are filed here, not on why a slot moved; the pool decides
when a slot is re-filed and at which rank, this file how and how it is found again.

Why a mixin of `Pool` and not an object the pool holds: `_put` and `_pull` run for every slot
re-filed, on every allocate and release, and `fullest` for every search step; held, each would
cost an attribute hop on the allocator's hot path, and the searches and the property tests
read the masks as the pool's attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultraplane.placement.blocks import IDLE_CAP

if TYPE_CHECKING:
    from ultraplane.placement.slots import Slot

__all__ = ["RankBuckets"]

_KEY = 1 << 20  # bucket key stride: ranks stay far below it


class RankBuckets:
    """Slots with free chips by rank, and per level by their most free chips in one server
    (rack, UltraServer), with one bitmask per count saying which ranks are filed."""

    # set by the pool before `RankBuckets.__init__`
    cps: int
    cpr: int
    cpu: int
    # the pool's block index (`ultraplane.placement.blocks`): a slot's rank counts its block's idle
    block_idle: dict[tuple[str, ...], dict[Slot, None]]

    def __init__(self, band: int) -> None:
        self.band = band
        self.server_masks = [0] * (self.cps + 1)
        self.rack_masks = [0] * (self.cpr + 1)
        # Bit k set = some slot has k as its most free chips in one server (rack): a query
        # for >= c chips visits only the counts that exist, not every count from c up.
        self.server_keys = 0
        self.rack_keys = 0
        # key = (most free in one server | rack) * _KEY + rank
        self.server_buckets: dict[int, dict[Slot, None]] = {}
        self.rack_buckets: dict[int, dict[Slot, None]] = {}
        self.us_mask = 0
        self.us_buckets: dict[int, dict[Slot, None]] = {}
        self._patterns: dict[int, int] = {}

    # -- filing (the pool calls these as it re-files a slot) -------------------------------
    def _put(self, slot: Slot, rank: int | None = None) -> None:
        ms, mr, total, _, _, _ = slot.indexed  # type: ignore[misc]
        if not total:
            # A full UltraServer can host nothing, so no query needs it: it stays out of the
            # buckets (rank -1). At 90% load most UltraServers are full, so block re-files and
            # whole takes skip them.
            slot.rank = -1
            return
        if rank is None:
            rank = min(len(self.block_idle[slot.block]), IDLE_CAP) * self.band + total
        slot.rank = rank
        bit = 1 << rank
        key = ms * _KEY + rank
        bucket = self.server_buckets.get(key)
        if bucket is None:
            self.server_buckets[key] = {slot: None}
            masks = self.server_masks
            if not masks[ms]:
                self.server_keys |= 1 << ms
            masks[ms] |= bit
        else:
            bucket[slot] = None
        key = mr * _KEY + rank
        bucket = self.rack_buckets.get(key)
        if bucket is None:
            self.rack_buckets[key] = {slot: None}
            masks = self.rack_masks
            if not masks[mr]:
                self.rack_keys |= 1 << mr
            masks[mr] |= bit
        else:
            bucket[slot] = None
        bucket = self.us_buckets.get(rank)
        if bucket is None:
            self.us_buckets[rank] = {slot: None}
            self.us_mask |= bit
        else:
            bucket[slot] = None

    def _pull(self, slot: Slot) -> None:
        ms, mr, _, _, _, _ = slot.indexed  # type: ignore[misc]
        rank = slot.rank
        slot.rank = -1
        bit = 1 << rank
        key = ms * _KEY + rank
        bucket = self.server_buckets[key]
        del bucket[slot]
        if not bucket:
            del self.server_buckets[key]
            masks = self.server_masks
            masks[ms] ^= bit
            if not masks[ms]:
                self.server_keys ^= 1 << ms
        key = mr * _KEY + rank
        bucket = self.rack_buckets[key]
        del bucket[slot]
        if not bucket:
            del self.rack_buckets[key]
            masks = self.rack_masks
            masks[mr] ^= bit
            if not masks[mr]:
                self.rack_keys ^= 1 << mr
        bucket = self.us_buckets[rank]
        del bucket[slot]
        if not bucket:
            del self.us_buckets[rank]
            self.us_mask ^= bit

    def _pattern(self, c: int) -> int:
        """Bits of every rank whose free-chip part is >= c, across all idle-count bands;
        `c < 0` means >= -1 - c and not a whole idle UltraServer (cached: a handful of c)."""
        found = self._patterns.get(c)
        if found is None:
            low = c if c >= 0 else -1 - c
            bands, width = (IDLE_CAP + 1, self.band) if self.band else (1, self.cpu + 1)
            top = self.cpu + 1 if c >= 0 else self.cpu
            one = ((1 << top) - 1) >> low << low
            found = 0
            for b in range(bands):
                found |= one << (b * width)
            self._patterns[c] = found
        return found

    # -- queries -----------------------------------------------------------------------
    def fullest(self, level: int, c: int, idle_ok: bool = True) -> Slot | None:
        """The lowest-ranked schedulable slot that has a level-domain with >= c free chips
        (and is not idle, unless `idle_ok`)."""
        pattern = self._pattern(c) if idle_ok else self._pattern(-1 - c)
        if level == 2:
            m = self.us_mask & pattern
            if not m:
                return None
            return next(iter(self.us_buckets[(m & -m).bit_length() - 1]))
        if level == 0:
            masks, buckets, keys = self.server_masks, self.server_buckets, self.server_keys
        else:
            masks, buckets, keys = self.rack_masks, self.rack_buckets, self.rack_keys
        # The lowest rank over every count k >= c that exists; on a tie the smallest k.
        keys = keys >> c << c
        best = best_k = -1
        while keys:
            low = keys & -keys
            keys ^= low
            k = low.bit_length() - 1
            m = masks[k] & pattern
            if m:
                rank = (m & -m).bit_length() - 1
                if best < 0 or rank < best:
                    best, best_k = rank, k
        if best < 0:
            return None
        return next(iter(buckets[best_k * _KEY + best]))
