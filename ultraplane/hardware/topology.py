"""The static topology: chip -> server -> rack -> UltraServer -> network levels -> cluster.

Why static and separate from usage: the tree changes only when an UltraServer joins, leaves or
changes health, while usage changes on every allocation. Following Kueue's TAS snapshot, the
`Topology` here is immutable and shared read-only; the mutable free-chip state lives in the
`Allocator`. Levels are ranked nearest first so "never cross a required level" is a comparison
of ranks. Network levels above the UltraServer come from the EFA fabric, e.g. the EKS labels
`topology.k8s.aws/network-node-layer-N`, where the highest N is the nearest group (`network-1`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import total_ordering

from ultraplane.hardware.profiles import Profile, load_profile
from ultraplane.ids import UltraServerName, parse_local_ref

__all__ = [
    "CLUSTER",
    "RACK",
    "SERVER",
    "ULTRASERVER",
    "Level",
    "Topology",
    "UltraServer",
    "build_fleet",
    "canonical_level",
    "level_problem",
    "network_from_labels",
    "parse_level",
]

# Bounds that keep every command finite: 8,192 Gen2 UltraServers are 1.18M chips, past the
# "up to 1M Trainium3 chips" per cluster; EFA fabrics have a handful of network layers.
MAX_ULTRASERVERS = 8192
MAX_SERVERS_PER_ULTRASERVER = 64
MAX_NETWORK_DEPTH = 16

_NAMED = {"server": 0, "rack": 1, "ultraserver": 2}
_CLUSTER_RANK = 1_000
_EKS_LAYER = "topology.k8s.aws/network-node-layer-"


@total_ordering
@dataclass(frozen=True)
class Level:
    """A topology level, ordered nearest first: server < rack < ultraserver < network-1 < ..."""

    rank: int

    @property
    def name(self) -> str:
        if self.rank == _CLUSTER_RANK:
            return "cluster"
        for name, rank in _NAMED.items():
            if rank == self.rank:
                return name
        return f"network-{self.rank - 2}"

    @property
    def network_depth(self) -> int:
        """1 for network-1 (the nearest EFA group), 0 for levels inside an UltraServer."""
        return max(0, self.rank - 2) if self.rank != _CLUSTER_RANK else _CLUSTER_RANK

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.rank < other.rank

    def __str__(self) -> str:
        return self.name


SERVER, RACK, ULTRASERVER, CLUSTER = Level(0), Level(1), Level(2), Level(_CLUSTER_RANK)


def parse_level(value: str | Level) -> Level:
    """`server`, `rack`, `ultraserver`, `network-N` (alias `block` = network-1) or `cluster`."""
    if isinstance(value, Level):
        return value
    text = value.strip().lower()
    if text in _NAMED:
        return Level(_NAMED[text])
    if text == "cluster":
        return CLUSTER
    if text == "block":
        return Level(3)
    digits = text[8:]
    if (text.startswith("network-") and digits.isascii() and digits.isdigit()
            and len(digits) <= 3 and 1 <= int(digits) <= MAX_NETWORK_DEPTH):
        return Level(2 + int(digits))
    raise ValueError(
        f"unknown topology level {str(value)[:40]!r}; use server, rack, ultraserver, block, "
        f"network-N (1 <= N <= {MAX_NETWORK_DEPTH}) or cluster"
    )


def canonical_level(value: object) -> object:
    """A level as the CRDs and the API spell it (`Rack` -> `rack`, `block` -> `network-1`),
    read by `parse_level`: the one level parser of the CLI and the API's request models
    (a pydantic before-validator): any letter case and the `block` alias. What is not a
    bare word (not a string, or padded with spaces) is returned as it is, for the model to
    refuse; an unknown level raises `parse_level`'s ValueError."""
    if not isinstance(value, str) or value != value.strip():
        return value
    return parse_level(value).name


def level_problem(topology: Topology, level: Level) -> str | None:
    """Why `level` is not a level of this fleet (a network level deeper than any UltraServer
    declares), or None. Such a request could never be placed as asked."""
    if level == CLUSTER or level.network_depth == 0:
        return None
    have = topology.network_depth()
    if level.network_depth <= have:
        return None
    return (f"{level.name} is not a level of this fleet: its UltraServers declare "
            f"{have} network level(s)" + (f" (network-1..network-{have})" if have > 1
                                           else " (network-1)" if have == 1 else ""))


def network_from_labels(labels: Mapping[str, str]) -> tuple[str, ...]:
    """EKS `network-node-layer-N` labels -> network names nearest first (highest N first)."""
    layers = sorted(
        ((int(k[len(_EKS_LAYER):]), v) for k, v in labels.items()
         if k.startswith(_EKS_LAYER) and k[len(_EKS_LAYER):].isdigit()),
        reverse=True,
    )
    return tuple(v for _, v in layers)


@dataclass(frozen=True)
class UltraServer:
    """One NeuronSwitch domain and its health. `servers` overrides the profile's count."""

    name: UltraServerName
    profile: str
    network: tuple[str, ...] = ()
    failed_chips: frozenset[str] = frozenset()
    cordoned_servers: frozenset[int] = frozenset()
    schedulable: bool = True
    servers: int | None = None

    def __post_init__(self) -> None:
        spec = load_profile(self.profile)  # raises UnknownProfileError naming the profile
        n = self.server_count
        if not 0 < n <= MAX_SERVERS_PER_ULTRASERVER:
            raise ValueError(f"UltraServer {self.name}: servers must be 1..{MAX_SERVERS_PER_ULTRASERVER}, "
                             f"got {n}")
        if len(self.network) > MAX_NETWORK_DEPTH:
            raise ValueError(f"UltraServer {self.name}: at most {MAX_NETWORK_DEPTH} network levels, "
                             f"got {len(self.network)}")
        for ref in self.failed_chips:
            server, chip = parse_local_ref(ref)
            if server >= n or chip >= spec.chips_per_server:
                raise ValueError(f"UltraServer {self.name}: failed chip {ref!r} does not exist")
        for server in self.cordoned_servers:
            if not 0 <= server < n:
                raise ValueError(f"UltraServer {self.name}: cordoned server {server} does not exist")

    @property
    def spec(self) -> Profile:
        return load_profile(self.profile)

    @property
    def server_count(self) -> int:
        return self.servers if self.servers is not None else self.spec.servers_per_ultraserver

    @property
    def chip_count(self) -> int:
        return self.server_count * self.spec.chips_per_server

    def domain(self, level: Level) -> tuple[str, ...]:
        """The key of the network domain at `level` holding this UltraServer (top-down)."""
        depth = level.network_depth
        if depth >= _CLUSTER_RANK or depth > len(self.network):
            return ("cluster",)
        # network is nearest first; a domain is named by everything from the top down to it.
        return tuple(reversed(self.network[depth - 1:]))


@dataclass(frozen=True)
class Topology:
    """An immutable set of UltraServers, in a fixed order (the allocator's tie-break)."""

    ultraservers: tuple[UltraServer, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.ultraservers) > MAX_ULTRASERVERS:
            raise ValueError(f"a fleet holds at most {MAX_ULTRASERVERS} UltraServers, "
                             f"got {len(self.ultraservers)}")
        index: dict[str, int] = {}
        for i, us in enumerate(self.ultraservers):
            if us.name in index:
                raise ValueError(f"UltraServer {us.name!r} is listed twice")
            index[us.name] = i
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(cls, ultraservers: Iterable[UltraServer]) -> Topology:
        return cls(tuple(ultraservers))

    @property
    def chip_count(self) -> int:
        return sum(us.chip_count for us in self.ultraservers)

    @property
    def profiles(self) -> list[str]:
        return sorted({us.profile for us in self.ultraservers})

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self.ultraservers)

    def ultraserver(self, name: str) -> UltraServer:
        """The UltraServer called `name`; raises KeyError with a sentence."""
        try:
            return self.ultraservers[self._index[name]]
        except KeyError:
            raise KeyError(f"no UltraServer named {name!r} in this topology") from None

    def network_depth(self) -> int:
        """How many network levels the deepest UltraServer declares."""
        return max((len(us.network) for us in self.ultraservers), default=0)


def build_fleet(
    profile: str | Profile, count: int, *, per_block: int = 16, prefix: str | None = None
) -> Topology:
    """`count` healthy UltraServers named `{prefix}-{i:04d}`, `per_block` per network block."""
    spec = profile if isinstance(profile, Profile) else load_profile(profile)
    if not 0 < count <= MAX_ULTRASERVERS:
        raise ValueError(f"count must be 1..{MAX_ULTRASERVERS} UltraServers, got {count}")
    if per_block <= 0:
        raise ValueError(f"per_block must be positive, got {per_block}")
    stem = prefix or spec.prefix
    return Topology(tuple(
        UltraServer(UltraServerName(f"{stem}-{i:04d}"), spec.name, (f"block-{i // per_block:03d}",))
        for i in range(count)
    ))
