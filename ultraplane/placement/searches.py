"""The placement algorithms: where a gang goes, given the usage in `slots`. Pure functions.

Policy "ultraplane" (see docs/allocator.md for the why and the benchmark):
1. A gang that fits in one UltraServer is searched level by level, tightest first (server, then
   rack, then UltraServer, never past the required level). At each level it takes the *fullest*
   UltraServer that still has a domain of that level with room (best fit, like Kueue's
   BestFit/LeastFreeCapacity), so partly used UltraServers fill up and idle ones stay whole. If
   only idle UltraServers are left it breaks one in the network block where small gangs
   already live (most mixed UltraServers), so blocks held by large gangs come back whole; a
   whole-UltraServer gang takes one from the block with the fewest idle UltraServers.
2. Inside the UltraServer it takes the tightest domain and packs partly used servers first
   (fewest free chips first), so whole servers and whole racks stay free.
3. A gang larger than an UltraServer takes whole idle UltraServers, from the network block with
   the fewest idle UltraServers that still holds it, widening to network-2, ... only if needed.
4. A small gang that fits in no single UltraServer may spread over several inside the tightest
   network domain the required level allows, taking the freest UltraServers first.
Policy "first-fit" takes the first chips in id order inside the first domain that has room.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from ultraplane.hardware.topology import CLUSTER, RACK, SERVER, ULTRASERVER, Level
from ultraplane.placement.slots import Pool, Slot

__all__ = [
    "Held", "Pairs", "Parts", "best_fit", "first_fit", "group", "level_of", "low_bits",
    "score_of", "tight_level",
]

PRESERVE_IDLE = True

# Chips of one UltraServer: (server index, chip bitmask) in server order. A whole idle
# UltraServer is the shared tuple `slot.all_pairs` (one per shape), so taking, scoring and
# releasing it never walks its servers.
Pairs = Sequence[tuple[int, int]]
# A placement in progress: slot -> its pairs (searches build this directly).
Held = dict[Slot, Pairs]
# Loose chips, e.g. a repair: (slot, server index, chip bitmask).
Parts = list[tuple[Slot, int, int]]

_IN_ULTRASERVER = (SERVER, RACK, ULTRASERVER)


def group(parts: Parts) -> Held:
    """Loose parts -> slot -> pairs (order of first appearance)."""
    held: dict[Slot, list[tuple[int, int]]] = {}
    for slot, s, m in parts:
        pairs = held.get(slot)
        if pairs is None:
            held[slot] = [(s, m)]
        else:
            pairs.append((s, m))
    return cast(Held, held)


def low_bits(mask: int, k: int) -> int:
    """The lowest `k` set bits of `mask` (chips in id order)."""
    if k >= mask.bit_count():
        return mask
    out = 0
    while k:
        bit = mask & -mask
        out |= bit
        mask ^= bit
        k -= 1
    return out


def tight_level(pool: Pool, chips: int) -> Level:
    if chips <= pool.cps:
        return SERVER
    return RACK if chips <= pool.cpr else ULTRASERVER


def _domain(slot: Slot, depth: int) -> tuple[str, ...]:
    return slot.domains[depth - 1] if depth <= len(slot.domains) else ("cluster",)


def _fits(slot: Slot, rank: int, c: int, whole: bool) -> bool:
    if whole:
        have = (min(slot.whole, 1), max(slot.rack_whole), slot.whole)[rank] * slot.cps
    else:
        have = (slot.max_server_free, max(slot.rack_free), slot.total)[rank]
    return have >= c


def _take_from(slot: Slot, servers: range, c: int, whole: bool) -> Pairs:
    """Pack `c` chips into `servers`: partly used servers first, fewest free first."""
    full, spr, cps = slot.full, slot.spr, slot.cps
    if slot.total == slot.cpu:
        # Idle slot: every server is whole, so the order below is plain index order.
        if c >= slot.cpu and len(servers) == slot.n:
            return slot.all_pairs
        first = servers.start
        n, rest = divmod(c, cps)
        n = min(n, len(servers))
        pairs = list(slot.all_pairs[first:first + n])
        if rest and n < len(servers):
            pairs.append((first + n, low_bits(full, rest)))
        return pairs
    free, nfree = slot.free, slot.nfree
    if whole:
        order = [s for s in servers if free[s] == full]
    else:
        # Fewest free chips first, so partly used servers fill up and whole servers (the most
        # free) come last; the sort is stable, so ties stay in server order.
        order = sorted([s for s in servers if nfree[s]], key=nfree.__getitem__)
    if slot.nracks > 1 and len(order) > 1 and order[-1] // spr != order[0] // spr:
        # Whole servers from the fuller rack first, to keep the emptier rack whole.
        rack_free = slot.rack_free
        order.sort(key=lambda s: (nfree[s], rack_free[s // spr]))
    out: list[tuple[int, int]] = []
    for s in order:
        if c <= 0:
            break
        k = nfree[s]
        if k <= c:
            out.append((s, free[s]))
            c -= k
        else:
            out.append((s, low_bits(free[s], c)))
            c = 0
    return out


def fill(slot: Slot, rank: int, c: int, whole: bool) -> Pairs:
    """Place `c` chips inside `slot` within one domain of level `rank` (0/1/2)."""
    if rank == 0:
        # The server with the fewest free chips that still fits (lowest index on ties); the
        # histogram says which count exists, list.index finds it at C speed.
        hist = slot.hist
        k = next(k for k in range(slot.cps if whole else c, slot.cps + 1) if hist[k])
        s = slot.nfree.index(k)
        return [(s, low_bits(slot.free[s], c))]
    if rank == 1:
        # The rack with the fewest free chips that fits (lowest index on ties).
        cap = [w * slot.cps for w in slot.rack_whole] if whole else slot.rack_free
        r = -1
        for i, have in enumerate(cap):
            if have >= c and (r < 0 or have < cap[r]):
                r = i
        spr = slot.spr
        return _take_from(slot, range(r * spr, min(slot.n, (r + 1) * spr)), c, whole)
    return _take_from(slot, range(slot.n), c, whole)


def _pick(pool: Pool, rank: int, c: int, whole: bool, within: list[Slot] | None,
          idle_ok: bool) -> Slot | None:
    if whole or within is not None:
        found = [s for s in (pool.slots if within is None else within)
                 if s.us.schedulable and (idle_ok or not s.idle) and _fits(s, rank, c, whole)]
        return min(found, key=lambda s: (s.rank, s.order), default=None)
    return pool.fullest(rank, c, idle_ok)


def best_fit(
    pool: Pool, chips: int, required: Level, preferred: Level | None, whole: bool,
    within: Iterable[Slot] | None = None,
) -> tuple[Level, Held] | None:
    """The "ultraplane" policy (module docstring); None when nothing fits now."""
    members = list(within) if within is not None else None
    if chips > pool.cpu:
        return _whole_ultraservers(pool, chips, required, members)
    last = required.rank if required.rank < 2 else 2
    start = 0 if chips <= pool.cps else 1 if chips <= pool.cpr else 2
    if preferred is not None and preferred.rank > start:
        start = preferred.rank
    if start > last:
        start = last
    # Without a preferred level, an idle UltraServer is broken only when no partly used one
    # can hold the gang at any level the request allows: idle UltraServers are what large
    # gangs need. With a preferred level, locality comes first.
    passes = (True,) if preferred is not None or not PRESERVE_IDLE else (False, True)
    for idle_ok in passes:
        if idle_ok and len(passes) == 2 and members is None:
            # No partly used UltraServer can hold it: only idle ones can, and any idle one
            # holds it at the tightest level, so the question is only which to break.
            slot = _idle_to_break(pool, chips)
            if slot is None:
                break
            return _IN_ULTRASERVER[start], {slot: fill(slot, start, chips, whole)}
        for rank in range(start, last + 1):
            slot = _pick(pool, rank, chips, whole, members, idle_ok)
            if slot is not None:
                return _IN_ULTRASERVER[rank], {slot: fill(slot, rank, chips, whole)}
    if required.rank > 2:
        return _spread(pool, chips, required, whole, members)
    return None


def _idle_to_break(pool: Pool, chips: int) -> Slot | None:
    """The idle UltraServer a gang of up to one UltraServer takes when it must break one.
    A whole-UltraServer gang is a large gang: the block with the fewest idle UltraServers
    (best fit, as for larger gangs). A smaller gang: the block with the most mixed
    UltraServers (`Pool.block_to_break`), so small gangs stay together and blocks that hold
    only large gangs can come back whole."""
    block = pool.block_with_idle(1) if chips >= pool.cpu else pool.block_to_break()
    if block is None:
        return None
    members = pool.block_idle[block]
    return min(members, key=_order) if len(members) > 1 else next(iter(members))


def _depths(pool: Pool, required: Level) -> list[int]:
    deepest = max((len(s.domains) for s in pool.slots), default=0)
    last = deepest + 1 if required == CLUSTER else min(required.network_depth, deepest + 1)
    return list(range(1, last + 1))


def _groups(slots: Iterable[Slot], depth: int) -> dict[tuple[str, ...], list[Slot]]:
    groups: dict[tuple[str, ...], list[Slot]] = {}
    for slot in sorted(slots, key=lambda s: s.order):
        groups.setdefault(_domain(slot, depth), []).append(slot)
    return groups


def _spread(pool: Pool, c: int, required: Level, whole: bool,
            within: list[Slot] | None) -> tuple[Level, Held] | None:
    live = [s for s in (pool.slots if within is None else within) if s.us.schedulable]
    for depth in _depths(pool, required):
        cap = {s: (s.whole * s.cps if whole else s.total) for s in live}
        groups = _groups(live, depth)
        fitting = [(sum(cap[s] for s in g), i) for i, g in enumerate(groups.values())
                   if sum(cap[s] for s in g) >= c]
        if not fitting:
            continue
        _, index = min(fitting)
        held: Held = {}
        for slot in sorted(list(groups.values())[index], key=lambda s: (-cap[s], s.order)):
            if c <= 0:
                break
            take = min(c, cap[slot])
            if take:
                held[slot] = _take_from(slot, range(slot.n), take, whole)
                c -= take
        return level_of(held), held
    return None


def _whole_ultraservers(pool: Pool, c: int, required: Level,
                        within: list[Slot] | None) -> tuple[Level, Held] | None:
    k = -(-c // pool.cpu)
    rem = c - (k - 1) * pool.cpu
    chosen: list[Slot] | None = None
    if within is None and rem < pool.cpu:
        chosen = _idle_plus_partial(pool, k - 1, rem)
    if within is None and chosen is None:
        block = pool.block_with_idle(k)
        if block is not None:
            members = pool.block_idle[block]
            chosen = sorted(members, key=_order)[:k] if len(members) > 1 else list(members)
    if chosen is None:
        idle = [s for s in (pool.slots if within is None else within)
                if s.us.schedulable and s.idle]
        for depth in _depths(pool, required):
            groups = _groups(idle, depth)
            fitting = [(len(g), i) for i, g in enumerate(groups.values()) if len(g) >= k]
            if fitting:
                group = list(groups.values())[min(fitting)[1]]
                blocks = _groups(group, 1)
                ordered = sorted(blocks.values(), key=lambda b: -len(b))
                chosen = [s for b in ordered for s in b][:k]
                break
    if chosen is None:
        return None
    held: Held = {}
    for slot in chosen:
        held[slot] = _take_from(slot, range(slot.n), min(c, slot.cpu), False)
        c -= slot.cpu
    return level_of(held), held


def _order(slot: Slot) -> int:
    return slot.order


def _idle_plus_partial(pool: Pool, need: int, rem: int) -> list[Slot] | None:
    """A gang of `need` whole UltraServers plus `rem` chips: `need` idle UltraServers and,
    in the same network block, the partly used UltraServer with the fewest free chips that
    still holds `rem` (best fit), so the remainder fills a broken UltraServer instead of
    breaking another idle one (and the gang does not wait for one more to drain). Blocks are
    tried from the fewest idle UltraServers up; None when no block has such a pair."""
    top = max(pool.blocks_by_idle, default=0)
    for count in range(need, top + 1):
        for block in pool.blocks_by_idle.get(count, ()):
            partial = [s for s in pool.block_slots[block]
                       if s.us.schedulable and not s.idle and s.total >= rem]
            if partial:
                members = pool.block_idle[block]
                whole = sorted(members, key=_order)[:need]
                return [*whole, min(partial, key=lambda s: (s.total, s.order))]
    return None


def first_fit(
    pool: Pool, chips: int, required: Level, whole: bool, within: Iterable[Slot] | None = None,
) -> tuple[Level, Held] | None:
    """The baseline: first chips in id order inside the first domain (of `required`) with room."""
    live = sorted((s for s in (pool.slots if within is None else within) if s.us.schedulable),
                  key=lambda s: s.order)

    def usable(sl: Slot, s: int) -> bool:
        return sl.free[s] == sl.full if whole else sl.nfree[s] > 0

    if required <= ULTRASERVER:
        span = (1, None, None)[required.rank]
        for slot in live:
            size = span or (slot.spr if required == RACK else slot.n)
            for first in range(0, slot.n, size):
                parts = _first_chips([(slot, s) for s in range(first, min(slot.n, first + size))
                                      if usable(slot, s)], chips)
                if parts:
                    held = group(parts)
                    return level_of(held), held
        return None
    depth = required.network_depth if required != CLUSTER else 10**6
    for members in _groups(live, depth).values():
        parts = _first_chips([(sl, s) for sl in members for s in range(sl.n) if usable(sl, s)],
                             chips)
        if parts:
            held = group(parts)
            return level_of(held), held
    return None


def _first_chips(servers: list[tuple[Slot, int]], c: int) -> Parts | None:
    if sum(sl.nfree[s] for sl, s in servers) < c:
        return None
    parts: Parts = []
    for slot, s in servers:
        if c <= 0:
            break
        mask = low_bits(slot.free[s], c)
        parts.append((slot, s, mask))
        c -= mask.bit_count()
    return parts


def level_of(held: Held) -> Level:
    """The tightest level containing every pair."""
    if len(held) == 1:
        for slot, pairs in held.items():
            if len(pairs) == 1:
                return SERVER
            spr = slot.spr
            r = pairs[0][0] // spr
            return RACK if all(s // spr == r for s, _ in pairs) else ULTRASERVER
    many = list(held)
    for depth in range(1, min(len(s.domains) for s in many) + 1):
        first = _domain(many[0], depth)
        if all(_domain(s, depth) == first for s in many):
            return Level(2 + depth)
    return CLUSTER


def score_of(held: Held) -> float:
    """Chips of the whole free servers, racks and UltraServers this placement would break."""
    score = 0
    for slot, pairs in held.items():
        if pairs is slot.all_pairs:
            continue  # the whole UltraServer is used, nothing is left broken
        full, free, cps = slot.full, slot.free, slot.cps
        idle = slot.total == slot.cpu
        if idle and sum(m.bit_count() for _, m in pairs) == slot.cpu:
            continue
        spr, sizes, rack_whole = slot.spr, slot.rack_sizes, slot.rack_whole
        if len(pairs) == 1:
            s, m = pairs[0]
            if free[s] == full and m != full:
                score += cps
            r = s // spr
            if rack_whole[r] == sizes[r] and m.bit_count() < sizes[r] * cps:
                score += sizes[r] * cps
        else:
            per_rack: dict[int, int] = {}
            for s, m in pairs:
                if free[s] == full and m != full:
                    score += cps
                r = s // spr
                per_rack[r] = per_rack.get(r, 0) + m.bit_count()
            for r, used in per_rack.items():
                if rack_whole[r] == sizes[r] and used < sizes[r] * cps:
                    score += sizes[r] * cps
        if idle:
            score += slot.cpu
    return float(score)


def nearby(kept: Parts, pool_slots: Iterable[Slot], required: Level, need: int) -> Parts | None:
    """`need` free chips for a repair, inside the required domain of the `kept` chips, taking
    the same server, then the same rack, UltraServer and network block first."""
    anchor = kept[0][0]
    kept_servers = {(id(sl), s) for sl, s, _ in kept}
    kept_racks = {(id(sl), s // sl.spr) for sl, s, _ in kept}
    kept_slots = {id(sl) for sl, _, _ in kept}
    if required <= ULTRASERVER:
        slots = [anchor]
    elif required == CLUSTER:
        slots = [s for s in pool_slots if s.us.schedulable or id(s) in kept_slots]
    else:
        depth = required.network_depth
        slots = [s for s in pool_slots if (s.us.schedulable or id(s) in kept_slots)
                 and _domain(s, depth) == _domain(anchor, depth)]
    rows: list[tuple[tuple[int, int, int, int], Slot, int]] = []
    for slot in slots:
        for s in range(slot.n):
            if not slot.nfree[s]:
                continue
            if required == SERVER and (id(slot), s) not in kept_servers:
                continue
            if required == RACK and (id(slot), s // slot.spr) not in kept_racks:
                continue
            rank = (0 if (id(slot), s) in kept_servers else
                    1 if (id(slot), s // slot.spr) in kept_racks else
                    2 if id(slot) in kept_slots else
                    3 if slot.block == anchor.block else 4)
            rows.append(((rank, slot.nfree[s], slot.order, s), slot, s))
    rows.sort(key=lambda r: r[0])
    return _first_chips([(sl, s) for _, sl, s in rows], need)
