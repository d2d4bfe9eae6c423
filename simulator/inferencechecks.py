"""`ultraplane simulate --inference`: the services file checked before a second of replay.

Why its own module: the CLI stays a parser, and every way a services file can be wrong is
said in one sentence naming `--inference` (exit 2) before the replay starts, not as a
traceback an hour into it: the YAML's fields (`servicefiles`), each request trace, each
replica's model on the fleet's chips, and the options a service replay does not combine
with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from ultraplane.simulator.fleets import ultraservers_of
from ultraplane.simulator.servicefiles import ServiceSpec, load_services
from ultraplane.simulator.services import Service

__all__ = ["check_services"]

HINT = "'--inference'"


def check_services(path: Path, topology: Any, faults: Any, budgets: Sequence[Any],
                   policies: Sequence[str]) -> list[ServiceSpec]:
    """The services of `path`, or click.BadParameter / UsageError with the reason."""
    if faults.chip_rate_per_hour or faults.server_rate_per_hour or faults.scripted:
        raise click.UsageError("--inference does not combine with chip or server failures "
                               "(--chip-failure-rate, --server-failure-rate, --fail)")
    if budgets:
        raise click.UsageError("--inference does not combine with --power-budget")
    if len(policies) > 1:
        raise click.UsageError("with --inference, give at most one --policy (the placement "
                               "policy of every run; the runs compare scaling policies)")
    try:
        specs = load_services(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=HINT) from None
    largest = max((int(us.chip_count) for us in ultraservers_of(topology)), default=0)
    profiles = sorted(topology.profiles)
    for spec in specs:
        if spec.profile and spec.profile not in profiles:
            raise click.BadParameter(f"service {spec.name!r}: profile {spec.profile!r} is not "
                                     f"in the fleet (it has {', '.join(profiles)})",
                                     param_hint=HINT)
        if spec.chips_per_replica > largest:
            raise click.BadParameter(f"service {spec.name!r}: a replica of "
                                     f"{spec.chips_per_replica} chips does not fit one "
                                     f"UltraServer of the fleet ({largest} chips)",
                                     param_hint=HINT)
        a = spec.autoscaling
        most = a.max_replicas if a is not None else spec.replicas or 1
        if most * spec.chips_per_replica > sum(int(us.chip_count)
                                               for us in ultraservers_of(topology)):
            raise click.BadParameter(f"service {spec.name!r}: {most} replicas of "
                                     f"{spec.chips_per_replica} chips are more than the fleet",
                                     param_hint=HINT)
        try:
            Service(spec, "ultraplane", profiles[0], 0.0)
        except ValueError as exc:
            raise click.BadParameter(f"service {spec.name!r}: {exc}", param_hint=HINT) from None
    return specs
