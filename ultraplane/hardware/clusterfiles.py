"""Cluster files: a YAML description of UltraServers and, optionally, current allocations.

Why a file format in the core: the `ultraplane place` dry run, tests and the docs need to show
"this cluster, with these jobs, where would a new job go?" without a Kubernetes API. Field
names follow the CRDs (`failedChips`, `cordonedServers`); snake_case is accepted too. Every
error names the field (`ultraservers[2].profile: ...`), because a traceback is no answer to a
typo. Format and an example: docs/allocator.md, examples/clusters/cluster.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ultraplane.hardware.profiles import load_profile
from ultraplane.hardware.topology import MAX_ULTRASERVERS, Topology, UltraServer, build_fleet
from ultraplane.ids import ChipId, JobKey, UltraServerName, chip_id, parse_chip_id

__all__ = ["ClusterFile", "ClusterFileError", "load_cluster_file", "parse_cluster"]


MAX_FILE_BYTES = 16 << 20


class ClusterFileError(ValueError):
    """A cluster file that cannot be read; the message names the field."""


@dataclass(frozen=True)
class ClusterFile:
    topology: Topology
    allocations: dict[JobKey, list[ChipId]]


def _get(entry: dict[str, Any], where: str, *names: str, default: Any = None) -> Any:
    for name in names:
        if name in entry:
            return entry[name]
    return default


def _ultraserver(entry: Any, where: str) -> list[UltraServer]:
    if not isinstance(entry, dict):
        raise ClusterFileError(f"{where} must be a mapping with at least 'name' and 'profile'")
    try:
        fleet = entry.get("fleet")
        if fleet is not None:
            if not isinstance(fleet, dict) or "profile" not in fleet or "count" not in fleet:
                raise ClusterFileError(f"{where}.fleet needs 'profile' and 'count'")
            return list(build_fleet(
                str(fleet["profile"]), int(fleet["count"]),
                per_block=int(_get(fleet, where, "perBlock", "per_block", default=16)),
                prefix=fleet.get("prefix"),
            ).ultraservers)
        for field in ("name", "profile"):
            if field not in entry:
                raise ClusterFileError(f"{where}.{field} is missing")
        load_profile(str(entry["profile"]))
        network = _get(entry, where, "network", default=[]) or []
        failed = _get(entry, where, "failedChips", "failed_chips", default=[]) or []
        cordoned = _get(entry, where, "cordonedServers", "cordoned_servers", default=[]) or []
        for field, value in (("network", network), ("failedChips", failed),
                             ("cordonedServers", cordoned)):
            if not isinstance(value, list):
                raise ClusterFileError(f"{where}.{field} must be a list")
        servers = entry.get("servers")
        return [UltraServer(
            UltraServerName(str(entry["name"])), str(entry["profile"]),
            tuple(str(n) for n in network), frozenset(str(c) for c in failed),
            frozenset(int(s) for s in cordoned), bool(entry.get("schedulable", True)),
            int(servers) if servers is not None else None,
        )]
    except ClusterFileError:
        raise
    except (ValueError, TypeError, OverflowError) as err:
        raise ClusterFileError(f"{where}: {err}") from None


def _chips(spec: Any, where: str, topology: Topology) -> list[ChipId]:
    """A chip id, a server id (all its chips) or an UltraServer name (all its chips)."""
    text = str(spec)
    if text in topology:
        us = topology.ultraserver(text)
        cps = us.spec.chips_per_server
        return [chip_id(us.name, s, c) for s in range(us.server_count) for c in range(cps)]
    parts = text.split("/")
    if len(parts) == 2 and parts[0] in topology and parts[1][:1] == "s" and parts[1][1:].isdigit():
        us = topology.ultraserver(parts[0])
        return [chip_id(us.name, int(parts[1][1:]), c) for c in range(us.spec.chips_per_server)]
    try:
        us_name, _, _ = parse_chip_id(text)
    except ValueError as err:
        raise ClusterFileError(f"{where}: {err}") from None
    if us_name not in topology:
        raise ClusterFileError(f"{where}: chip {text!r} is on an UltraServer not in the file")
    return [ChipId(text)]


def parse_cluster(data: Any, source: str = "cluster file") -> ClusterFile:
    if not isinstance(data, dict) or not isinstance(data.get("ultraservers"), list):
        raise ClusterFileError(f"{source}: 'ultraservers' must be a list of UltraServers")
    found: list[UltraServer] = []
    for i, entry in enumerate(data["ultraservers"]):
        found += _ultraserver(entry, f"ultraservers[{i}]")
        if len(found) > MAX_ULTRASERVERS:  # YAML aliases can repeat a fleet: stop early
            raise ClusterFileError(f"{source}: at most {MAX_ULTRASERVERS} UltraServers "
                                   f"(ultraservers[{i}] passes it)")
    if not found:
        raise ClusterFileError(f"{source}: 'ultraservers' is empty")
    try:
        topology = Topology(tuple(found))
    except ValueError as err:
        raise ClusterFileError(f"ultraservers: {err}") from None
    raw = data.get("allocations") or {}
    if not isinstance(raw, dict):
        raise ClusterFileError("allocations must map job keys to lists of chips")
    allocations: dict[JobKey, list[ChipId]] = {}
    for job, specs in raw.items():
        if not isinstance(specs, list) or not specs:
            raise ClusterFileError(f"allocations.{job} must be a non-empty list of chips")
        chips: list[ChipId] = []
        for j, spec in enumerate(specs):
            chips += _chips(spec, f"allocations.{job}[{j}]", topology)
        allocations[JobKey(str(job))] = chips
    return ClusterFile(topology, allocations)


def load_cluster_file(path: str | Path) -> ClusterFile:
    """Read and check a cluster file; ClusterFileError (a ValueError) names what is wrong."""
    where = f"cluster file {str(path)!r}"
    try:
        with Path(path).open("rb") as fh:  # bounded: /dev/zero must not fill the memory
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ClusterFileError(f"cannot read {where}: {err.strerror or err}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ClusterFileError(f"{where} is larger than {MAX_FILE_BYTES // (1 << 20)} MiB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ClusterFileError(f"{where} is not UTF-8 text (byte {err.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ClusterFileError(f"{where} is not valid YAML{line}") from None
    except RecursionError:
        raise ClusterFileError(f"{where} nests too deeply to be a cluster file") from None
    return parse_cluster(data, f"cluster file {str(path)!r}")
