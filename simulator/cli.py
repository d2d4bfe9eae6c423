"""`ultraplane simulate` (offline replay) and `ultraplane simulator` (cluster mode).

Thin on purpose: parse and validate options (exit code 2 and one sentence
naming the option on bad input), then hand over to `replay` / `cluster`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from ultraplane.simulator.faults import MAX_CHIP_RATE_PER_HOUR, MAX_SERVER_RATE_PER_HOUR
from ultraplane.simulator.traces import (
    MAX_BAD_ROWS_KEPT,
    MAX_TIME_S,
    BadRow,
    TraceJob,
    load_trace,
)

from ultraplane.commands.logs import log_level_option
from ultraplane.commands.paramtypes import FiniteFloat
from ultraplane.kubeclients import (
    ClusterAccess,
    ClusterUnavailable,
    cluster_options,
    exit_unavailable,
)
from ultraplane.pods.neurondevices import MAX_CHIPS, PLUGIN_DIR, PLUGIN_SOCKET


def parse_fleet(value: str) -> Any:
    """`trn3-gen2:64` -> a Topology of 64 Gen2 UltraServers."""
    from ultraplane.hardware.topology import build_fleet

    profile, sep, count = value.partition(":")
    if not sep or not count.isascii() or not count.isdigit() or len(count) > 9 or int(count) < 1:
        raise click.BadParameter(f"expected PROFILE:COUNT such as trn3-gen2:64, got {value!r}",
                                 param_hint="'--fleet'")
    try:
        return build_fleet(profile, int(count))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--fleet'") from None


def parse_fault(value: str) -> tuple[float, str]:
    at, sep, target = value.partition(":")
    try:
        seconds = float(at)
    except ValueError:
        raise click.BadParameter(f"expected SECONDS:CHIP-OR-SERVER, got {value[:80]!r}",
                                 param_hint="'--fail'") from None
    if not 0 <= seconds <= MAX_TIME_S:  # also refuses nan and inf
        raise click.BadParameter(f"SECONDS must be 0..{MAX_TIME_S:g}, got {at[:40]!r}",
                                 param_hint="'--fail'")
    return seconds, target if sep else ""


def _load_traces(paths: tuple[Path, ...], skip_bad: bool,
                 precisions: dict[str, frozenset[str]]) -> tuple[list[TraceJob], list[str]]:
    """Every trace's jobs, or exit 2 listing the bad rows; `precisions` maps each of the fleet's
    profiles to the precisions its chip has: a row asking for one that some UltraServer lacks is
    a bad row here, not a traceback in the middle of the replay."""
    jobs: list[TraceJob] = []
    bad: list[str] = []  # the first MAX_BAD_ROWS_KEPT of all files, then a count
    total = 0
    for path in paths:
        prefix = f"{path.stem}/" if len(paths) > 1 else ""
        try:
            got, rows = load_trace(path, prefix=prefix)
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="'--trace'") from None
        except ValueError as exc:  # TraceError, or not a regular file of bounded size
            raise click.BadParameter(str(exc), param_hint="'--trace'") from None
        for job in got:
            lacking = sorted(p for p, have in precisions.items() if job.precision not in have)
            if lacking:
                rows.add(BadRow(job.line, (
                    f"precision {job.precision} is not supported by {', '.join(lacking)} "
                    f"(supported: {', '.join(sorted(frozenset.intersection(*precisions.values())))})"
                )))
            else:
                jobs.append(job)
        rows.sort(key=lambda r: r.line)
        total += rows.total
        bad.extend([f"{path}:{r.line}: {r.message}" for r in rows][:MAX_BAD_ROWS_KEPT - len(bad)])
    if total > len(bad):
        bad.append(f"... and {total - len(bad)} more bad row(s)")
    if bad and not skip_bad:
        click.echo(f"Error: {total} bad row(s) in --trace (fix them or pass --skip-bad-rows):",
                   err=True)
        for line in bad:
            click.echo(f"  {line}", err=True)
        sys.exit(2)
    jobs.sort(key=lambda j: j.submit_s)
    return jobs, bad


def _queues(path: Path | None, jobs: list[TraceJob], topology: Any) -> tuple[Any, ...] | None:
    """The tenant queues of a replay: from --queues, else an equal share per trace tenant
    (None: the trace names no tenant and no --queues was given)."""
    from ultraplane.policies.queuedocuments import queue_file
    from ultraplane.policies.quotas import equal_shares

    capacity: dict[str, int] = {}
    for us in topology.ultraservers:
        capacity[us.profile] = capacity.get(us.profile, 0) + us.chip_count
    tenants = {j.tenant for j in jobs if j.tenant is not None}
    if path is None:
        return tuple(equal_shares(tenants, capacity)) if tenants else None
    try:  # the file `ultraplane serve --queues` reads, in the TenantQueue's schema
        specs = queue_file(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--queues'") from None
    missing = sorted(tenants - {s.name for s in specs})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise click.BadParameter(f"the trace names tenant(s) with no queue: {shown}",
                                 param_hint="'--queues'")
    return tuple(specs)


def _cohorts(path: Path | None) -> tuple[Any, ...]:
    """The cohorts of the --queues file (its TenantCohort entries): none without one."""
    if path is None:
        return ()
    from ultraplane.policies.cohortdocuments import cohort_file

    try:
        return tuple(cohort_file(path))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--queues'") from None


def _check_out(out_dir: Path) -> None:
    """The report folder exists (made now) and is writable: said before an hour of replay."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".ultraplane-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise click.BadParameter(f"cannot write the report to {out_dir}: {reason}",
                                 param_hint="'--out'") from None


def _power_budgets(value: str | None, policy: str, topology: Any) -> tuple[Any, ...]:
    """`--power-budget`: watts, N% of the fleet's peak, or a budgets YAML file."""
    from ultraplane.hardware.powermodels import chip_power_of
    from ultraplane.policies.budgetdocuments import budget_file
    from ultraplane.policies.powerbudgets import BudgetSpec, validate_budgets

    if value is None:
        return ()
    hint = "'--power-budget'"
    text = value.strip()
    try:
        if text.endswith((".yaml", ".yml")) or Path(text).is_file():
            specs = budget_file(text)  # the file `ultraplane serve --power-budgets` reads
            validate_budgets(specs, topology)
            return tuple(specs)
        peak = sum(chip_power_of(us.profile).peak * us.chip_count for us in topology.ultraservers)
        number = text[:-1] if text.endswith("%") else text
        try:
            float(number)
        except ValueError:
            raise ValueError(f"{value!r} is not a number of watts") from None
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 < share <= 1000:
                raise ValueError("a percentage must be above 0 and at most 1000")
            watts = peak * share / 100.0
        else:
            watts = float(text)
        return (BudgetSpec("fleet", watts, policy=policy),)  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (give watts, N% of the fleet's peak, or a budgets "
                                 "YAML file)", param_hint=hint) from None


@click.command("simulate")
@click.option("--fleet", help="PROFILE:COUNT, e.g. trn3-gen2:64.")
@click.option("--cluster", "cluster_file", type=click.Path(path_type=Path, dir_okay=False),
              help="A cluster YAML file (as in `ultraplane place`) instead of --fleet.")
@click.option("--trace", "traces", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Job trace CSV (repeatable; several files are merged with file-prefixed ids).")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False))
@click.option("--policy", "policies", multiple=True, type=click.Choice(["ultraplane", "first-fit"]),
              help="Placement policy (repeatable; default both).")
@click.option("--chips-per-gpu", type=click.IntRange(min=1, max=144), default=1, show_default=True,
              help="Trainium chips per trace GPU.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--failure-policy", type=click.Choice(["RestartAll", "ReplaceAffected", "Fail"]),
              default="RestartAll", show_default=True)
@click.option("--chip-failure-rate", type=FiniteFloat(min=0, max=MAX_CHIP_RATE_PER_HOUR),
              default=0.0,
              help="Random chip failures per chip-hour (seeded).")
@click.option("--server-failure-rate", type=FiniteFloat(min=0, max=MAX_SERVER_RATE_PER_HOUR),
              default=0.0,
              help="Random server failures per server-hour (seeded).")
@click.option("--fail", "scripted", multiple=True, help="Scripted failure SECONDS:CHIP-or-SERVER id.")
@click.option("--checkpoint-interval", type=FiniteFloat(min=60, max=MAX_TIME_S), default=600.0,
              show_default=True, help="Seconds between checkpoints (60 s to the longest trace).")
@click.option("--skip-bad-rows", is_flag=True, help="Replay the good rows; still report the bad ones.")
@click.option("--no-reservation", is_flag=True,
              help="Plain best-effort FIFO: no backfill reservation for waiting gangs of whole "
                   "UltraServers (see docs/operator.md).")
@click.option("--queue-stretch", type=FiniteFloat(min=0, max=1_000_000), default=None,
              help="Inside a priority, queue by target start = submit + STRETCH x run time; "
                   "gangs of over half the largest UltraServer (73+ chips on Gen2) by submit "
                   "time. 0 = arrival order (FIFO). [default: 10]")
@click.option("--queues", "queues_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="YAML list of tenant queue specs (name, nominal, cohort, borrowingLimit, "
                   "lendingLimit, weight, ...; docs/queues.md); the trace's `tenant` column names "
                   "each job's queue. Without it, a trace with tenants gives each an equal "
                   "nominal share of the fleet in one cohort.")
@click.option("--power-budget", default=None, metavar="WATTS|N%|FILE",
              help="A fleet-wide power budget in watts, or N% of the fleet's peak draw, or a "
                   "YAML file of nested budgets (docs/power.md). Jobs are admitted only within "
                   "it; running jobs are capped, lowest priority first, to stay within it.")
@click.option("--power-policy", type=click.Choice(["Peak", "Predicted", "Measured"]),
              default="Predicted", show_default=True,
              help="How a budget's draw is predicted (a budgets file may set its own).")
@click.option("--idle-power-down", type=FiniteFloat(min=0, max=MAX_TIME_S), default=0.0,
              show_default=True, metavar="SECONDS",
              help="Power down an UltraServer idle this long (0 = off).")
@click.option("--inference", "services_file",
              type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="A YAML list of inference services (InferenceJob-like specs with a request "
                   "trace; docs/simulator.md) served on the same fleet as the --trace jobs, "
                   "under each scaling policy: ultraplane, static-peak and hpa.")
@click.option("--no-moves", is_flag=True,
              help="With tenant queues: never move a running job to make room for a job within "
                   "its queue's unused quota (docs/queues.md, Moves).")
@click.option("--checkpoint-on-notice", is_flag=True,
              help="Training jobs save a checkpoint when told to move: a move loses the save "
                   "time, not the work since the last periodic checkpoint.")
@click.option("--queue-packing", is_flag=True,
              help="With tenant queues: place a queue's jobs within its quota on the "
                   "UltraServers it already uses, among those about as good (docs/queues.md, "
                   "Queue packing).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@log_level_option(default="warning")
def simulate(fleet: str | None, cluster_file: Path | None, traces: tuple[Path, ...], out_dir: Path,
             policies: tuple[str, ...], chips_per_gpu: int, seed: int, failure_policy: str,
             chip_failure_rate: float, server_failure_rate: float, scripted: tuple[str, ...],
             checkpoint_interval: float, skip_bad_rows: bool, no_reservation: bool,
             queue_stretch: float | None, no_progress: bool, queues_file: Path | None = None,
             power_budget: str | None = None, power_policy: str = "Predicted",
             idle_power_down: float = 0.0, services_file: Path | None = None,
             no_moves: bool = False, checkpoint_on_notice: bool = False,
             queue_packing: bool = False) -> None:
    """Replay a job trace offline through the core allocator and write a report."""
    from ultraplane.simulator.faults import FaultPlan
    from ultraplane.simulator.replay import ReplayConfig
    from ultraplane.simulator.runs import run_policies

    from ultraplane.scheduling.queueorder import DEFAULT_STRETCH

    if (fleet is None) == (cluster_file is None):
        raise click.UsageError("give exactly one of --fleet or --cluster")
    if not traces and services_file is None:
        raise click.UsageError("give a job trace (--trace), inference services (--inference) "
                               "or both")
    if fleet is not None:
        topology = parse_fleet(fleet)
        fleet_name = fleet
        held: dict[str, list[str]] = {}
    else:
        from ultraplane.hardware.clusterfiles import load_cluster_file

        assert cluster_file is not None
        try:
            loaded = load_cluster_file(str(cluster_file))
            topology = loaded.topology
            held = {str(k): [str(c) for c in v] for k, v in loaded.allocations.items()}
        except (ValueError, OSError) as exc:
            raise click.BadParameter(str(exc), param_hint="'--cluster'") from None
        fleet_name = str(cluster_file)
    try:
        plan = FaultPlan(chip_failure_rate, server_failure_rate,
                         tuple(parse_fault(s) for s in scripted))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--fail'") from None
    from ultraplane.hardware.profiles import load_profile

    precisions = {name: frozenset(str(p) for p in load_profile(name).chip.tflops)
                  for name in topology.profiles}
    jobs, bad = _load_traces(traces, skip_bad_rows, precisions)
    queues = _queues(queues_file, jobs, topology)
    cohorts = _cohorts(queues_file)
    budgets = _power_budgets(power_budget, power_policy, topology)
    services = None
    if services_file is not None:
        from ultraplane.simulator.inferencechecks import check_services

        services = check_services(services_file, topology, plan, budgets, policies)
    _check_out(out_dir)
    configs = [ReplayConfig(policy=p, chips_per_gpu=chips_per_gpu, seed=seed,
                            checkpoint_interval_s=checkpoint_interval,
                            failure_policy=failure_policy, faults=plan,
                            reservation=not no_reservation,
                            queue_stretch=DEFAULT_STRETCH if queue_stretch is None else queue_stretch,
                            queues=queues, cohorts=cohorts, power_budgets=budgets,
                            idle_power_down_s=idle_power_down, moves=not no_moves,
                            checkpoint_on_notice=checkpoint_on_notice,
                            queue_packing=queue_packing)
               for p in (policies or ("ultraplane", "first-fit"))]
    show = not no_progress and sys.stderr.isatty()
    started = time.perf_counter()
    summary = run_policies(topology, jobs, configs, out_dir, fleet_name=fleet_name,
                           traces=[str(t) for t in traces], bad_rows=bad, progress=show, held=held,
                           services=services)
    wall = time.perf_counter() - started
    def ratio(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    from ultraplane.simulator.verdicts import compare

    def idle_share(s: dict[str, Any]) -> str:
        share = s.get("energy_idle_share")
        return "" if share is None else f" ({share:.0%} of it idle draw)"

    verdict = compare(summary)
    click.echo(verdict.headline)
    for point in verdict.points:
        click.echo(f"  {point}")
    for policy, s in summary.items():
        click.echo(f"{policy:>10}: {s['jobs_completed']}/{s['jobs_submitted']} completed, "
                   f"useful utilization {s['useful_utilization']:.1%} (allocated "
                   f"{s['allocated_utilization']:.1%}), JCT p50 {s['jct_p50_s'] / 3600:.2f} h, "
                   f"queue delay mean {s['queue_delay_mean_s'] / 60:.1f} min, "
                   f"energy {s['energy_kwh'] / 1000:,.1f} MWh{idle_share(s)}, "
                   f"rejected {s['jobs_rejected']}, "
                   f"split {s['split_jobs_that_fit_one_ultraserver']} of "
                   f"{s['jobs_that_fit_one_ultraserver']} jobs that fit one UltraServer")
        for ref, name in (("greedy", "greedy in one domain"), ("fluid", "fluid (no topology)")):
            click.echo(f"{'':>12}vs {name}: JCT mean x{ratio(s.get(f'jct_mean_vs_{ref}'))}, "
                       f"large-job wait x{ratio(s.get(f'large_wait_vs_{ref}'))}, "
                       f"useful utilization x{ratio(s.get(f'useful_util_vs_{ref}'))}")
    first: dict[str, Any] = next(iter(summary.values()), {})
    click.echo(f"{first.get('large_job_threshold', '')}; xN = the policy's figure over the "
               "reference's (JCT and waits: lower is better; utilization: higher is better); "
               "times are simulated")
    if services is not None:
        from ultraplane.simulator.inferenceruns import say_inference

        for line in say_inference(out_dir):
            click.echo(line)
    if bad:
        click.echo(f"{len(bad)} bad row(s) skipped (listed in summary.json)", err=True)
    click.echo(f"wrote {out_dir}/report.html ({wall:.1f} s)")


@click.group("simulator", invoke_without_command=True)
@click.option("--time-scale", type=FiniteFloat(min=0, min_open=True), default=1.0,
              show_default=True, help="Simulated seconds per wall second.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9102, show_default=True,
              help="Prometheus metrics port (0: do not serve).")
@click.option("--heartbeat-s", type=FiniteFloat(min=0.1), default=2.0, show_default=True,
              help="Seconds between status writes.")
@click.option("--namespace", default=None, help="Watch one namespace only (default: all).")
@click.option("--inference-trace", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, metavar="CSV",
              help="Serve vLLM metrics on each running InferenceJob replica pod's `metrics` "
                   "port, replaying this request trace (Azure CSV: TIMESTAMP, ContextTokens, "
                   "GeneratedTokens) split evenly over each job's ready replicas.")
@click.option("--rate-steps", default="0:1", show_default=True, metavar="S:X,...",
              help="The trace's rate multiple from each second of the replay on, e.g. "
                   "0:1,300:4,900:1.")
@cluster_options
@log_level_option(default="info")
@click.pass_context
def simulator(ctx: click.Context, time_scale: float, metrics_port: int, heartbeat_s: float,
              namespace: str | None, inference_trace: Path | None, rate_steps: str,
              kubeconfig: str | None, kube_context: str | None) -> None:
    """Run virtual chips for admitted jobs in a Kubernetes cluster (like a kubelet).

    With a subcommand, run that instead: `device-plugin` is the fake Neuron device plugin.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ultraplane.simulator.cluster import run_cluster

    from ultraplane.serving.requesttraces import RateSteps, RequestTrace

    try:
        steps = RateSteps.parse(rate_steps)
        requests = RequestTrace.load(inference_trace) if inference_trace else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    try:
        run_cluster(time_scale=time_scale, metrics_port=metrics_port, heartbeat_s=heartbeat_s,
                    namespace=namespace, access=ClusterAccess(kubeconfig, kube_context),
                    requests=requests, steps=steps)
    except ClusterUnavailable as exc:
        exit_unavailable(exc)


@simulator.command("device-plugin")
@click.option("--node-name", envvar="NODE_NAME", default=None, metavar="NAME",
              help="The Node this runs on, whose labels say how many chips to advertise "
                   "(the DaemonSet sets NODE_NAME from spec.nodeName). [env: NODE_NAME]")
@click.option("--chips", type=click.IntRange(0, MAX_CHIPS), default=None,
              help="Advertise this many chips whatever the Node's labels say; the Kubernetes "
                   "API is then not read.")
@click.option("--ultraserver-label", default=None, metavar="KEY",
              help="Node label holding the UltraServer id, as for `ultraplane operator`. "
                   "[default: ultraplane.dev/ultraserver]")
@click.option("--plugin-dir", type=click.Path(path_type=Path, file_okay=False),
              default=PLUGIN_DIR, show_default=True,
              help="The kubelet's device plugin directory (holds kubelet.sock).")
@click.option("--socket-name", default=PLUGIN_SOCKET, show_default=True,
              help="File name of this plugin's socket in --plugin-dir.")
@click.option("--poll-seconds", type=FiniteFloat(0.01, 60), default=1.0, show_default=True,
              help="Seconds between checks that both sockets are still the ones registered.")
@click.option("--resync-seconds", type=FiniteFloat(0, 86_400), default=60.0,
              show_default=True, help="Seconds between re-reads of the Node's labels (0: never).")
@cluster_options
@log_level_option(default="info")
def device_plugin(node_name: str | None, chips: int | None, ultraserver_label: str | None,
                  plugin_dir: Path, socket_name: str, poll_seconds: float, resync_seconds: float,
                  kubeconfig: str | None, kube_context: str | None) -> None:
    """Fake AWS Neuron device plugin: advertise a Trainium server's chips to this kubelet."""
    import signal
    import threading

    from ultraplane.simulator.deviceplugins import (
        PluginConfig,
        PluginError,
        node_source,
        run_plugin,
    )

    from ultraplane.pods.neurondevices import devices_for_node
    from ultraplane.pods.nodelabels import DEFAULT_LABELS, NodeLabels

    if chips is None and not node_name:
        raise click.UsageError("give --node-name (or set NODE_NAME from the downward API) to "
                               "read the Node's labels, or --chips N")
    config = PluginConfig(plugin_dir=plugin_dir, socket_name=socket_name, poll_s=poll_seconds,
                          resync_s=0.0 if chips is not None else resync_seconds)
    try:
        config.check()
    except PluginError as exc:
        raise click.UsageError(str(exc)) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if chips is not None:
            fixed = devices_for_node(node_name or "this node", {}, chips=chips)
            run_plugin(config, lambda: fixed, stop)
        else:
            assert node_name
            keys = NodeLabels(ultraserver=ultraserver_label or DEFAULT_LABELS.ultraserver)
            source = node_source(node_name, keys, ClusterAccess(kubeconfig, kube_context))
            run_plugin(config, source, stop)
    except ClusterUnavailable as exc:
        exit_unavailable(exc)
    except PluginError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
