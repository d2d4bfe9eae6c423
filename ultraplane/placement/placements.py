"""The allocator's inputs and outputs: a request, a placement, or the reason it cannot fit.

Why compact parts: at 1M chips a placement of 1,152 chips would cost 1,152 Python strings on the
hot path. A `Placement` stores `(ultraserver, server, chip-bitmask)` parts and builds the chip-id
strings only when someone reads `chip_ids` (then caches them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, Literal, cast

from ultraplane.hardware.profiles import load_profile
from ultraplane.hardware.topology import parse_level
from ultraplane.ids import ChipId, JobKey, ServerId, parse_chip_id, server_id

__all__ = [
    "MODES", "AllocationConflict", "NoFit", "NoFitKind", "Placement", "PlacementRequest",
    "SpanMode", "request_from_topology",
]

# `Deferred`: it would be placed, but the cycle's launch budget is spent (Scheduler.cycle).
# `NoQuota`: its tenant queue's quota does not admit it now; `Inadmissible`: its queue refuses
# it (the namespace may not use it, its priority is above the queue's maximum, no such queue;
# ultraplane.policies.quotas). `NoPower`: a power budget covering its chips has no headroom for it
# (ultraplane.policies.powerbook).
NoFitKind = Literal["NoCapacity", "Unsatisfiable", "Deferred", "NoQuota", "Inadmissible",
                    "NoPower"]
# How a gang that fits in one UltraServer may be spread (see PlacementRequest).
SpanMode = Literal["Local", "SplitWhenItPays", "Unconstrained"]
MODES: tuple[SpanMode, ...] = ("Local", "SplitWhenItPays", "Unconstrained")


class AllocationConflict(ValueError):
    """A chip is unknown, unusable or already held by another job."""


_SUFFIX = [f"/c{c:02d}" for c in range(64)]


@cache
def _bits(mask: int) -> tuple[int, ...]:
    """Indices of the set bits of a server mask (cached: masks have at most 64 bits, and in
    practice a handful of distinct values)."""
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


@dataclass(frozen=True)
class PlacementRequest:
    """A gang of `chips`. Levels are names (`server`, `rack`, `ultraserver`, `block`, ...).

    `required_level` is never crossed. `preferred_level` is where the search starts (default:
    the tightest level that can hold the job); it widens up to the required level.
    `whole_servers` gives the job whole servers only (chips must be a multiple of a server).

    `mode` says whether a gang that fits in one UltraServer may be split across several
    (the NeuronSwitch domain is what makes its collectives fast, so splitting is opt-in):
    `Local` never splits it (it waits for one UltraServer); `Unconstrained` spreads it when
    no single UltraServer has room, up to the required level; `SplitWhenItPays` lets the
    scheduler split it only when the predicted slowdown of the split costs less time than
    the predicted wait for one UltraServer (`ultraplane.scheduling.predictions`). Unset means
    `Unconstrained` when `required_level` is above `ultraserver` (an explicit opt-in) and
    `Local` otherwise. Gangs larger than one UltraServer are not affected: they take whole
    UltraServers in the nearest network domain the required level allows.
    """

    chips: int
    required_level: str | None = None
    preferred_level: str | None = None
    whole_servers: bool = False
    profile: str | None = None
    mode: SpanMode | None = None

    def __post_init__(self) -> None:
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips <= 0:
            raise ValueError(f"chips must be a positive integer, got {self.chips!r}")
        for name in ("required_level", "preferred_level"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, parse_level(value).name)
        if self.profile is not None:
            load_profile(self.profile)  # UnknownProfileError names the known profiles
        if self.mode is None:
            far = self.required_level is not None and parse_level(self.required_level).rank > 2
            object.__setattr__(self, "mode", "Unconstrained" if far else "Local")
        elif self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def may_split(self) -> bool:
        """Whether a gang that fits in one UltraServer may ever be spread over several."""
        return self.mode != "Local"


def request_from_topology(chips: int, topology: Mapping[str, Any] | None,
                          profile: str | None = None) -> PlacementRequest:
    """The gang request of a job spec's `topology` block (wire names: requiredLevel,
    preferredLevel, wholeServers, mode). The one reading of that block: the operator, the
    REST API (job specs and dry runs) and trace replay all build their requests here, so the
    locality rule cannot differ between them. Bad values raise ValueError naming the field."""
    topo = topology or {}
    kw: dict[str, Any] = {}
    for field, name in (("requiredLevel", "required_level"), ("preferredLevel", "preferred_level")):
        value = topo.get(field)
        if value is not None:
            try:
                kw[name] = parse_level(str(value)).name
            except ValueError as exc:
                raise ValueError(f"topology.{field}: {exc}") from None
    mode = topo.get("mode")
    if mode is not None and str(mode) not in MODES:
        raise ValueError(f"topology.mode: must be one of {', '.join(MODES)}, got {mode!r}")
    return PlacementRequest(
        chips=chips, whole_servers=bool(topo.get("wholeServers", False)), profile=profile,
        mode=cast("SpanMode | None", None if mode is None else str(mode)), **kw)


@dataclass(frozen=True)
class Placement:
    """Where a gang runs: `parts` are `(ultraserver, server, chip bitmask)`, in chip-id order.

    `level` is the tightest level that contains every chip; `score` counts, in chips, the whole
    free servers, racks and UltraServers this placement broke (0 = broke nothing whole).
    """

    parts: tuple[tuple[str, int, int], ...]
    level: str = "cluster"
    score: float = 0.0

    @classmethod
    def from_chip_ids(
        cls, chip_ids: Iterable[str], *, level: str = "cluster", score: float = 0.0
    ) -> Placement:
        masks: dict[tuple[str, int], int] = {}
        for cid in chip_ids:
            us, server, chip = parse_chip_id(cid)
            masks[(us, server)] = masks.get((us, server), 0) | (1 << chip)
        return cls(tuple((us, s, m) for (us, s), m in sorted(masks.items())), level, score)

    @cached_property
    def chip_ids(self) -> tuple[ChipId, ...]:
        out: list[str] = []
        for us, server, mask in self.parts:
            prefix = f"{us}/s{server:02d}"
            out += [prefix + _SUFFIX[c] for c in _bits(mask)]
        # ChipId is a NewType of str: a cast, not a call per chip.
        return cast("tuple[ChipId, ...]", tuple(out))

    @cached_property
    def servers(self) -> tuple[ServerId, ...]:
        return tuple(dict.fromkeys(server_id(us, s) for us, s, _ in self.parts))

    @cached_property
    def ultraservers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(us for us, _, _ in self.parts))

    @cached_property
    def chips_by_ultraserver(self) -> tuple[tuple[str, int], ...]:
        """(UltraServer, chips held there), in fleet order of the parts."""
        out: dict[str, int] = {}
        for us, _, mask in self.parts:
            out[us] = out.get(us, 0) + mask.bit_count()
        return tuple(out.items())

    @property
    def chips(self) -> int:
        return sum(m.bit_count() for _, _, m in self.parts)


@dataclass(frozen=True)
class NoFit:
    """Why a request is not placed. `Unsatisfiable`: never, even on an empty cluster.

    `blocking` lists jobs whose release would free the nearest-to-fitting domain, when known.
    """

    kind: NoFitKind
    message: str
    blocking: tuple[JobKey, ...] = ()
