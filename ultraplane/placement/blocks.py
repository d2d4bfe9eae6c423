"""A pool's network blocks, filed by how many idle and how many mixed UltraServers they hold.

Why apart from the rank buckets (`ultraplane.placement.buckets`): a gang of several UltraServers
asks for a block with enough idle ones, and a gang smaller than one UltraServer for the block
whose idle UltraServer it should break. Those are questions about blocks, not slots, and this
index moves only when a slot turns idle or mixed, so it reads best on its own.

Why a mixin of `Pool` (`ultraplane.placement.slots`) and not an object the pool holds: the pool
updates it from `reindex_one`, on every allocate and release, and the searches read its dicts
as the pool's attributes (`pool.block_idle`); a held object would add an attribute hop to every
slot re-filed on the allocator's hot path, and change what the searches read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ultraplane.placement.slots import Slot

__all__ = ["IDLE_CAP", "BlockIndex"]

# Blocks are told apart by idle UltraServers 0, 1 and "2 or more": a single idle UltraServer
# cannot host a multi-UltraServer gang, two can. Measured: finer bands (up to 8) changed the
# large-gang rejections by less than the noise, while every band change re-files a block.
IDLE_CAP = 2


class BlockIndex:
    """Per network block of one pool: its slots, its idle slots, its mixed count; blocks by
    idle count, and blocks with an idle slot by mixed count."""

    def __init__(self) -> None:
        self.block_slots: dict[tuple[str, ...], dict[Slot, None]] = {}
        self.block_idle: dict[tuple[str, ...], dict[Slot, None]] = {}
        self.blocks_by_idle: dict[int, dict[tuple[str, ...], None]] = {}
        # Mixed UltraServers (`Slot.mixed`) per block: where small gangs live. Not part of the
        # rank (changing it would re-file a block on every small gang), only read when
        # choosing which block's idle UltraServers to use.
        self.block_mixed: dict[tuple[str, ...], int] = {}
        # Blocks with at least one idle slot, by their mixed count (for `block_to_break`).
        self.idle_by_mixed: dict[int, dict[tuple[str, ...], None]] = {}

    # -- filing (the pool calls these as it re-files a slot) -------------------------------
    def _count_mixed(self, block: tuple[str, ...], mixed: bool) -> None:
        old = self.block_mixed.get(block, 0)
        new = old + (1 if mixed else -1)
        if new:
            self.block_mixed[block] = new
        else:
            del self.block_mixed[block]
        if self.block_idle[block]:
            self._file_idle_block(block, old, None)
            self._file_idle_block(block, None, new)

    def _file_idle_block(self, block: tuple[str, ...], old: int | None, new: int | None) -> None:
        if old is not None:
            bucket = self.idle_by_mixed[old]
            del bucket[block]
            if not bucket:
                del self.idle_by_mixed[old]
        if new is not None:
            self.idle_by_mixed.setdefault(new, {})[block] = None

    def _set_idle(self, block: tuple[str, ...], slot: Slot, idle: bool) -> None:
        members = self.block_idle[block]
        old = len(members)
        if idle:
            members[slot] = None
        else:
            del members[slot]
        new = len(members)
        if old > 0:
            bucket = self.blocks_by_idle[old]
            del bucket[block]
            if not bucket:
                del self.blocks_by_idle[old]
        if new > 0:
            self.blocks_by_idle.setdefault(new, {})[block] = None
        if (old > 0) != (new > 0):
            mixed = self.block_mixed.get(block, 0)
            self._file_idle_block(block, mixed if old else None, mixed if new else None)

    # -- queries -----------------------------------------------------------------------
    def block_with_idle(self, need: int) -> tuple[str, ...] | None:
        """The network block with the fewest idle slots that still has >= need (best fit);
        on a tie the one with the most mixed UltraServers, then the first filed."""
        top = max(self.blocks_by_idle, default=0)
        for count in range(need, top + 1):
            bucket = self.blocks_by_idle.get(count)
            if bucket:
                if len(bucket) == 1:
                    return next(iter(bucket))
                mixed = self.block_mixed.get
                return max(bucket, key=lambda b: mixed(b, 0))
        return None

    def block_to_break(self) -> tuple[str, ...] | None:
        """The network block whose idle slot a gang smaller than one UltraServer should break:
        the one with the most mixed UltraServers (where small gangs already live, so its
        idle ones are the least likely to join a whole free block), then the fewest idle."""
        if not self.idle_by_mixed:
            return None
        bucket = self.idle_by_mixed[max(self.idle_by_mixed)]
        if len(bucket) == 1:
            return next(iter(bucket))
        idle = self.block_idle
        fewest = min(len(idle[b]) for b in bucket)
        ties = [b for b in bucket if len(idle[b]) == fewest]
        if len(ties) == 1:
            return ties[0]
        # Several: the first in the filing order of blocks by idle count (deterministic).
        return next(b for b in self.blocks_by_idle[fewest] if b in bucket)
