"""The `ultraplane` command.

Subcommands live next to the code they drive and are loaded lazily by import
path, so `ultraplane place` never imports kopf, FastAPI or matplotlib, and the
core keeps no static dependency on its adapters.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

# name -> ("module:attribute" of a click.Command, one-line help shown by --help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "place": ("ultraplane.commands.placing:place", "Place one gang request on a fleet (dry run)."),
    "profiles": ("ultraplane.commands.placing:profiles", "List the hardware profiles and their figures."),
    "operator": ("ultraplane.operator.cli:operator", "Run the Kubernetes operator (kopf)."),
    "simulator": ("ultraplane.simulator.cli:simulator", "Run virtual chips for admitted jobs in a cluster."),
    "model-server": ("ultraplane.simulator.servingcommands:model_server",
                     "Run a simulated model server exporting vLLM metrics."),
    "load-generator": ("ultraplane.simulator.servingcommands:load_generator",
                       "Offer a request trace to model servers."),
    "simulate": ("ultraplane.simulator.cli:simulate", "Replay a job trace offline and write a report."),
    "serve": ("ultraplane.api.cli:serve", "Serve the REST API (embedded fleet by default)."),
    # the client (also the kubectl plugin `kubectl-ultraplane`): ultraplane.api.client
    "get": ("ultraplane.api.client.commands:get", "List jobs or UltraServers."),
    "describe": ("ultraplane.api.client.commands:describe", "Show one job in detail."),
    "apply": ("ultraplane.api.client.commands:apply", "Submit job manifests (-f FILE)."),
    "delete": ("ultraplane.api.client.commands:delete", "Delete jobs."),
    "top": ("ultraplane.api.client.commands:top", "Chips, utilization and power now."),
    "why": ("ultraplane.api.client.commands:why", "Why a job is pending, and when it starts."),
    "accounting": ("ultraplane.api.client.commands:accounting",
                   "Per-job usage with sacct's columns."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        target = entry[0]
        module_name, _, attr = target.partition(":")
        command: Any = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing must not import every adapter (kopf, FastAPI, matplotlib) just for --help.
        rows = [(name, help_text) for name, (_, help_text) in sorted(SUBCOMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ultraplane")
def main() -> None:
    """Ultraplane: topology-aware gang scheduling onto Trainium UltraServers."""


if __name__ == "__main__":
    main()
