"""`ultraplane place` and `ultraplane profiles`: the core, from a shell.

Why a dry run in the CLI: before a job is submitted, a user (or a reviewer of this allocator)
wants to see where a gang would land and why it would not, on a fleet described in one flag or
one YAML file. Exit codes are part of the interface: 0 placed, 1 does not fit now, 2 invalid
input or a request that can never fit (one sentence naming the field, never a traceback).
"""

from __future__ import annotations

import json
from typing import Any

import click
from pydantic.alias_generators import to_camel

from ultraplane.commands.logs import log_level_option
from ultraplane.hardware.clusterfiles import ClusterFileError, load_cluster_file
from ultraplane.hardware.profiles import Precision, UnknownProfileError, load_profile, profile_names
from ultraplane.hardware.topology import Topology, build_fleet, level_problem, parse_level
from ultraplane.ids import parse_chip_id
from ultraplane.placement.allocator import AllocationConflict, Allocator, NoFit, PlacementRequest
from ultraplane.placement.placements import Placement

__all__ = ["place", "profiles"]

_OUTPUT = click.Choice(["table", "json"])
MAX_CHIPS = 1_048_576  # the largest gang a job may ask for (resources' MAX_JOB_CHIPS)


def _fleet(value: str) -> Topology:
    profile, sep, count = value.rpartition(":")
    if not sep or not count.isascii() or not count.isdigit() or len(count) > 9 or int(count) <= 0:
        raise click.BadParameter("must be PROFILE:COUNT with COUNT > 0, e.g. trn3-gen2:8",
                                 param_hint="--fleet")
    try:
        return build_fleet(profile, int(count))
    except (UnknownProfileError, ValueError) as err:
        raise click.BadParameter(str(err), param_hint="--fleet") from None


def _level(value: str | None, hint: str) -> str | None:
    if value is None:
        return None
    try:
        return parse_level(value).name
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=hint) from None


def _allocator(fleet: str | None, cluster: str | None, policy: str) -> Allocator:
    if (fleet is None) == (cluster is None):
        raise click.UsageError("give exactly one of --fleet PROFILE:COUNT or --cluster FILE.yaml")
    if fleet is not None:
        return Allocator(_fleet(fleet), policy=policy)  # type: ignore[arg-type]
    try:
        loaded = load_cluster_file(str(cluster))
    except ClusterFileError as err:
        raise click.BadParameter(str(err), param_hint="--cluster") from None
    alloc = Allocator(loaded.topology, policy=policy)  # type: ignore[arg-type]
    for job, chips in loaded.allocations.items():
        try:
            alloc.assign(job, chips)
        except AllocationConflict as err:
            raise click.BadParameter(f"allocations.{job}: {err}", param_hint="--cluster") from None
    return alloc


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"s{start:02d}" if start == prev else f"s{start:02d}-s{prev:02d}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def _placement_json(p: Placement) -> dict[str, Any]:
    """The REST API's placement vocabulary (camelCase: `chipIds`, `ultraServers`)."""
    return {"placed": True, "chips": p.chips, "level": p.level, "score": p.score,
            "ultraServers": list(p.ultraservers), "servers": list(p.servers),
            "chipIds": list(p.chip_ids)}


def _camel(row: dict[str, Any]) -> dict[str, Any]:
    """snake_case keys -> camelCase, as the REST API writes them (values left alone)."""
    return {to_camel(k): v for k, v in row.items()}


def _placement_table(p: Placement) -> str:
    rows: dict[str, tuple[list[int], int]] = {}
    for cid in p.chip_ids:
        us, server, _ = parse_chip_id(cid)
        servers, chips = rows.get(us, ([], 0))
        if not servers or servers[-1] != server:
            servers.append(server)
        rows[us] = (servers, chips + 1)
    width = max(12, *(len(us) for us in rows))
    lines = [f"placed {p.chips} chips; tightest level: {p.level}; "
             f"fragmentation score: {p.score:g}",
             f"{'ULTRASERVER':<{width}}  {'CHIPS':>5}  SERVERS"]
    lines += [f"{us:<{width}}  {chips:>5}  {_ranges(servers)}"
              for us, (servers, chips) in rows.items()]
    return "\n".join(lines)


@click.command("place")
@click.option("--fleet", metavar="PROFILE:COUNT", help="COUNT UltraServers, 16 per network block.")
@click.option("--cluster", metavar="FILE.yaml", help="UltraServers and allocations (docs/allocator.md).")
@click.option("--chips", type=int, required=True, help="Chips in the gang.")
@click.option("--require", "required", metavar="LEVEL", help="Never cross this level "
              "(server, rack, ultraserver, block, network-N, cluster).")
@click.option("--prefer", "preferred", metavar="LEVEL", help="Start the search at this level.")
@click.option("--whole-servers", is_flag=True, help="Whole servers only.")
@click.option("--mode", type=click.Choice(["Local", "SplitWhenItPays", "Unconstrained"]),
              help="May a gang that fits one UltraServer span several (default: Local unless "
                   "--require is above ultraserver; a dry run splits only when Unconstrained).")
@click.option("--profile", metavar="PROFILE", help="Only UltraServers of this profile.")
@click.option("--policy", type=click.Choice(["ultraplane", "first-fit"]), default="ultraplane",
              show_default=True)
@click.option("-o", "--output", type=_OUTPUT, default="table", show_default=True)
@log_level_option(default="warning")
def place(fleet: str | None, cluster: str | None, chips: int, required: str | None,
          preferred: str | None, whole_servers: bool, mode: str | None, profile: str | None,
          policy: str, output: str) -> None:
    """Show where a gang of CHIPS would be placed (nothing is allocated)."""
    if not 0 < chips <= MAX_CHIPS:
        raise click.BadParameter(f"must be 1..{MAX_CHIPS} chips, got {chips}",
                                 param_hint="--chips")
    if profile is not None:
        try:
            load_profile(profile)
        except UnknownProfileError as err:
            raise click.BadParameter(str(err), param_hint="--profile") from None
    request = PlacementRequest(
        chips=chips, required_level=_level(required, "--require"),
        preferred_level=_level(preferred, "--prefer"), whole_servers=whole_servers,
        profile=profile, mode=mode,  # type: ignore[arg-type]
    )
    alloc = _allocator(fleet, cluster, policy)
    for hint, level in (("--require", request.required_level), ("--prefer", request.preferred_level)):
        problem = level_problem(alloc.topology, parse_level(level)) if level else None
        if problem:
            raise click.BadParameter(problem, param_hint=hint)
    got = alloc.place(request)
    if isinstance(got, NoFit) and got.kind == "Unsatisfiable":
        raise click.BadParameter(f"can never fit in this cluster: {got.message}",
                                 param_hint="--chips")
    if isinstance(got, NoFit):
        if output == "json":
            click.echo(json.dumps({"placed": False, "kind": got.kind, "message": got.message,
                                   "blocking": list(got.blocking)}))
        else:
            click.echo(f"does not fit now ({got.kind}): {got.message}")
        raise SystemExit(1)
    click.echo(json.dumps(_placement_json(got)) if output == "json" else _placement_table(got))


def _profile_row(name: str) -> dict[str, Any]:
    p = load_profile(name)
    return {
        "name": p.name, "display_name": p.display_name, "projected": p.projected,
        "servers_per_ultraserver": p.servers_per_ultraserver,
        "chips_per_server": p.chips_per_server, "racks_per_ultraserver": p.racks_per_ultraserver,
        "chips_per_ultraserver": p.chips_per_ultraserver,
        "ultraserver_tflops": {str(x): p.ultraserver_tflops(x) for x in Precision
                               if x in p.chip.tflops},
        "ultraserver_hbm_gib": p.ultraserver_hbm_gib(),
        "ultraserver_hbm_tbps": p.ultraserver_hbm_tbps(),
        "efa_gbps": p.efa_gbps, "bandwidth_gbps": p.bandwidth_gbps,
        "chip": {"name": p.chip.name, "peak_watts": p.chip.peak_watts,
                 "idle_watts": p.chip.idle_watts, "hbm_gib": p.chip.hbm_gib,
                 "tflops": {str(k): v for k, v in p.chip.tflops.items()}},
        "assumptions": p.assumptions,
    }


@click.command("profiles")
@click.option("-o", "--output", type=_OUTPUT, default="table", show_default=True)
@log_level_option(default="warning")
def profiles(output: str) -> None:
    """List the hardware profiles with their UltraServer aggregates."""
    rows = [_profile_row(n) for n in profile_names()]
    if output == "json":
        click.echo(json.dumps([_camel({**r, "chip": _camel(r["chip"])}) for r in rows],
                              indent=2))
        return
    head = (f"{'PROFILE':<16}{'LAYOUT':<12}{'CHIPS':>6}{'MXFP8 PF':>10}{'BF16 PF':>9}"
            f"{'HBM GiB':>9}{'HBM TB/s':>10}{'PEAK kW':>9}  NOTE")
    click.echo(head)
    for r in rows:
        layout = f"{r['servers_per_ultraserver']}x{r['chips_per_server']}"
        tf = r["ultraserver_tflops"]
        note = "projected" if r["projected"] else ""
        peak_kw = r["chip"]["peak_watts"] * r["chips_per_ultraserver"] / 1000
        click.echo(
            f"{r['name']:<16}{layout:<12}{r['chips_per_ultraserver']:>6}"
            f"{tf.get('MXFP8', 0) / 1000:>10.1f}{tf.get('BF16', 0) / 1000:>9.1f}"
            f"{r['ultraserver_hbm_gib']:>9,.0f}{r['ultraserver_hbm_tbps']:>10.1f}"
            f"{peak_kw:>9.1f}  {note}")
