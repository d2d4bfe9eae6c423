"""Per-profile domain sizes, baked into the CEL rules at generation time.

The API server cannot call Python, so the sizes of a server, a rack and an UltraServer
of each hardware profile are written into the rules as CEL map literals when the CRDs
are generated. They come from `ultraplane.hardware.profiles` (the one source of hardware facts);
a test regenerates the CRDs and compares, so a profile change that is not regenerated
fails CI instead of silently admitting jobs that can never fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ultraplane.hardware.profiles import load_profile
from ultraplane.resources.commons import ProfileName, cel_map


@dataclass(frozen=True)
class Sizes:
    """Chips per domain for one profile."""

    chips_per_server: int
    servers_per_rack: int
    servers_per_ultraserver: int
    racks_per_ultraserver: int

    @property
    def chips_per_rack(self) -> int:
        return self.chips_per_server * self.servers_per_rack

    @property
    def chips_per_ultraserver(self) -> int:
        return self.chips_per_server * self.servers_per_ultraserver


@cache
def profile_sizes() -> dict[str, Sizes]:
    """Sizes of every profile, in the order of `ProfileName`."""
    sizes: dict[str, Sizes] = {}
    for name in ProfileName:
        p = load_profile(name.value)
        sizes[name.value] = Sizes(
            chips_per_server=p.chips_per_server,
            servers_per_rack=p.servers_per_rack,
            servers_per_ultraserver=p.servers_per_ultraserver,
            racks_per_ultraserver=p.racks_per_ultraserver,
        )
    return sizes


def level_chips(level: str) -> dict[str, int]:
    """Chips in one domain of `level` (server, rack or ultraserver) for each profile."""
    attr = {
        "server": "chips_per_server",
        "rack": "chips_per_rack",
        "ultraserver": "chips_per_ultraserver",
    }[level]
    return {name: getattr(s, attr) for name, s in profile_sizes().items()}


def largest(level: str) -> int:
    """The biggest domain of `level` over all profiles: the bound when no profile is set."""
    return max(level_chips(level).values())


def cel_level_chips(level: str, *, as_text: bool = False) -> str:
    return cel_map(level_chips(level), as_text=as_text)


def cel_servers(*, as_text: bool = False) -> str:
    sizes = {n: s.servers_per_ultraserver for n, s in profile_sizes().items()}
    return cel_map(sizes, as_text=as_text)


def cel_chips_per_server(*, as_text: bool = False) -> str:
    return cel_map({n: s.chips_per_server for n, s in profile_sizes().items()}, as_text=as_text)


def cel_racks() -> str:
    return cel_map({n: s.racks_per_ultraserver for n, s in profile_sizes().items()})


def max_servers() -> int:
    return max(s.servers_per_ultraserver for s in profile_sizes().values())


def max_chips_per_ultraserver() -> int:
    return max(s.chips_per_ultraserver for s in profile_sizes().values())


def cel_profiles() -> str:
    """The hardware profiles' names as a CEL list literal."""
    return "[" + ", ".join(f"'{n}'" for n in sorted(profile_sizes())) + "]"
