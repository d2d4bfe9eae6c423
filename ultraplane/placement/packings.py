"""Packing a tenant queue's jobs onto the UltraServers it already uses, where that costs
nothing by the allocator's own rule.

Why: a quota counts chips, but a gang needs its chips inside one UltraServer. When one
queue's jobs are scattered over many UltraServers beside other queues' jobs, the chips a
queue leaves unused are fragments on UltraServers the others keep busy, and a job of that
queue which fits its unused quota finds no UltraServer to hold it. Gathering each queue's
jobs on the UltraServers it already holds chips on keeps the others' unused quota in fewer,
larger pieces.

The allocator's choice stays the rule (`ultraplane.placement.searches`, best fit): packing
only picks, among UltraServers that hold the request at the same level (server, rack or
UltraServer) as the allocator's own choice, one where the queue holds more chips, most
first, and only when that UltraServer has at most `slack` free chips more than the
allocator's choice. Why that bound: best fit takes the fullest UltraServer so the freer one
keeps its larger hole for a later gang; taking the freer one instead shrinks that hole by
at most the difference of their free chips, so `slack` bounds what packing can cost a later
gang (0: exact ties of free chips only). A gang over several UltraServers, or none that
fits, is placed as the allocator places it. The queues themselves are the caller's (the
quota book's): here only the chips of one queue per UltraServer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.placement.placements import PlacementRequest

__all__ = ["DEFAULT_SLACK", "place_packed"]

# One server's chips on the fleets this was measured on (4 on Trn3 Gen2): a later gang
# loses at most one server's worth of its largest hole.
DEFAULT_SLACK = 4
_LOOKS = 8  # UltraServers of the queue tried per placement, most chips first


def place_packed(allocator: Allocator, request: PlacementRequest, within: Sequence[str],
                 queue_chips: Mapping[str, int], *, slack: int = DEFAULT_SLACK
                 ) -> Placement | NoFit:
    """Where `request` would go inside `within` (nothing changes): the allocator's choice,
    or an UltraServer of `within` holding more of the queue's chips (`queue_chips`:
    UltraServer -> chips of the job's queue there) that holds it at the same level with at
    most `slack` more free chips (module docstring)."""
    today = allocator.place_without(request, (), within)
    if not isinstance(today, Placement) or not queue_chips or len(today.ultraservers) != 1:
        return today
    chosen = today.ultraservers[0]
    here = queue_chips.get(chosen, 0)
    bound = allocator.free_chips((chosen,)) + slack
    members = set(within)
    order = {name: i for i, name in enumerate(within)}
    own = sorted((us for us, n in queue_chips.items() if n > here and us in members),
                 key=lambda us: (-queue_chips[us], order[us]))
    for us in own[:_LOOKS]:
        if allocator.free_chips((us,)) > bound:
            continue
        got = allocator.place_without(request, (), (us,))
        if isinstance(got, Placement) and got.level == today.level:
            return got
    return today
