"""The embedded fleet: building its topology, and the read snapshot served to clients.

Reads are the hot path (the benchmark asks for >= 1,000/s on two cores), so
the UltraServer list and the capacity report are rebuilt once per tick and
served from this snapshot instead of recomputed per request.
Those bytes name every tenant's jobs; a caller who may not read every namespace gets
the views with other tenants' jobs as "another tenant" (`redact_view`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ultraplane.api.backends import capacity_json
from ultraplane.api.schemas import UltraServerView
from ultraplane.api.settings import Settings

from ultraplane.hardware.topology import Topology, build_fleet
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator


def build_topology(settings: Settings) -> tuple[Topology, dict[JobKey, list[str]]]:
    """The fleet from `--cluster FILE` (with its preset allocations) or `--fleet PROFILE:N`."""
    if settings.cluster:
        from ultraplane.hardware.clusterfiles import load_cluster_file

        cluster = load_cluster_file(settings.cluster)
        return cluster.topology, {JobKey(k): list(v) for k, v in cluster.allocations.items()}
    profile, count = settings.fleet_profile_and_count()
    return build_fleet(profile, count), {}


def ultraserver_of(chip: str) -> str:
    return chip.split("/", 1)[0]


class FleetView:
    """Read-only snapshot of the fleet, refreshed by the backend after each change."""

    def __init__(
        self, topology: Topology, allocator: Allocator, preset: Mapping[JobKey, list[str]]
    ) -> None:
        self.topology = topology
        self.allocator = allocator
        self.preset = dict(preset)
        self.ultraservers: list[UltraServerView] = []
        self.capacity: dict[str, Any] = {}
        self.ultraservers_json = b'{"items":[]}'
        self.capacity_json = b"{}"
        self.power_watts = 0.0
        self.utilization = 0.0
        self.energy_kwh = 0.0
        self.version = 0

    def reserved(self) -> dict[str, str]:
        """UltraServer -> job, as the views last refreshed show the reservation."""
        return {v.name: v.reserved_for for v in self.ultraservers if v.reserved_for}

    def refresh(self, jobs: Mapping[str, Any], runtime: Any,
                reserved: Mapping[str, str] | None = None) -> None:
        # job keys, as the operator's UltraServer.status.jobs, so both backends list jobs alike
        owner = {key: j.key for j in jobs.values() for key in j.held}
        allocated: Counter[str] = Counter()
        on_us: defaultdict[str, set[str]] = defaultdict(set)
        for key, placement in self.allocator.allocations().items():
            for chip in placement.chip_ids:
                us_name = ultraserver_of(chip)
                allocated[us_name] += 1
                on_us[us_name].add(owner.get(key, str(key)))
        fleet = runtime.fleet()
        per_us: Mapping[str, tuple[float, float]] = getattr(fleet, "per_ultraserver", {}) or {}
        views = []
        for us in self.topology.ultraservers:
            util, power = per_us.get(us.name, (0.0, 0.0))
            total = us.chip_count
            views.append(
                UltraServerView(
                    name=us.name,
                    profile=us.profile,
                    network=list(us.network),
                    schedulable=us.schedulable,
                    chips=total,
                    allocated_chips=allocated[us.name],
                    free_chips=max(0, total - allocated[us.name] - len(us.failed_chips)),
                    failed_chips=sorted(us.failed_chips),
                    jobs=sorted(on_us[us.name]),
                    utilization=float(util),
                    power_watts=float(power),
                    reserved_for=(reserved or {}).get(us.name),
                )
            )
        self.ultraservers = views
        self.capacity = capacity_json(self.allocator.capacity())
        # Rendered once per refresh: reads are the hot path and serve these bytes as they are.
        self.ultraservers_json = json.dumps(
            {"items": [v.model_dump(mode="json", by_alias=True) for v in views]},
            separators=(",", ":"),
        ).encode()
        self.capacity_json = json.dumps(self.capacity, separators=(",", ":")).encode()
        self.power_watts = float(getattr(fleet, "power_watts", 0.0))
        self.utilization = float(getattr(fleet, "utilization", 0.0))
        self.energy_kwh = float(getattr(fleet, "energy_kwh", 0.0))
        self.version += 1

    def summary(self, jobs: Mapping[str, Any]) -> dict[str, Any]:
        phases: Counter[tuple[str, str]] = Counter((j.kind, j.phase) for j in jobs.values())
        return {
            "chips": self.topology.chip_count,
            "allocated_chips": sum(v.allocated_chips for v in self.ultraservers),
            "power_watts": self.power_watts,
            "utilization": self.utilization,
            "energy_kwh": self.energy_kwh,
            "jobs": dict(phases),
        }


ANOTHER_TENANT = "another tenant"


def namespace_of(job: str) -> str | None:
    """The namespace in a job's fleet-view name: `tj/<ns>/<name>`, `ij/<ns>/<name>#i` (job
    keys) or `<ns>/<name>` (a dry run's victims); None for a name with no namespace (a
    cluster file's preset allocation), which only an every-namespace reader may see."""
    parts = job.split("#", 1)[0].split("/")
    if len(parts) == 3:
        return parts[1]
    if len(parts) == 2:
        return parts[0]
    return None


def redact(jobs: Iterable[str], may_read: Callable[[str | None], bool]) -> list[str]:
    """Names the reader may see, and one "another tenant" for all the others."""
    shown = sorted({j for j in jobs if may_read(namespace_of(j))})
    hidden = any(not may_read(namespace_of(j)) for j in jobs)
    return [*shown, ANOTHER_TENANT] if hidden else shown


def redact_view(view: UltraServerView, may_read: Callable[[str | None], bool]) -> UltraServerView:
    """An UltraServer as one reader may see it: chips and power alike, other tenants unnamed."""
    reserved = view.reserved_for
    if reserved is not None and not may_read(namespace_of(reserved)):
        reserved = ANOTHER_TENANT
    return view.model_copy(update={"jobs": redact(view.jobs, may_read), "reserved_for": reserved})
