"""`ultraplane operator`: run the kopf operator with Ultraplane's options."""

from __future__ import annotations

import click

from ultraplane.commands.logs import log_level_option
from ultraplane.commands.paramtypes import FiniteFloat
from ultraplane.kubeclients import (
    ClusterAccess,
    ClusterUnavailable,
    cluster_options,
    connect,
    exit_unavailable,
)


@click.command("operator")
@click.option("--namespace", "-n", "namespaces", multiple=True,
              help="Watch only this namespace (repeatable). Default: all namespaces.")
@click.option("--all-namespaces", "-A", is_flag=True, help="Watch every namespace (default).")
@click.option("--peering", "lease", metavar="NAME", default=None,
              help="Elect one active replica with the coordination.k8s.io Lease NAME.")
@click.option("--standalone", is_flag=True, help="No leader election (a single replica).")
@click.option("--lease-namespace", default="default", show_default=True,
              help="Namespace of the Lease used by --peering.")
@click.option("--fleet", default=None, metavar="NAME",
              help="Use only UltraServers labelled ultraplane.dev/fleet=NAME.")
@click.option("--liveness", metavar="URL", default=None,
              help="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz.")
@click.option("--concurrency", type=click.IntRange(1, 256), default=64, show_default=True,
              help="Status writes in flight at once.")
@click.option("--no-events", is_flag=True, help="Do not post Kubernetes Events.")
@click.option("--event-qps", type=FiniteFloat(0, 10_000), default=None,
              help="Events posted per second at most, after a burst; 0 = no limit. "
              "Status holds every transition; Events beyond the rate are summarised. [default: 5]")
@click.option("--event-burst", type=click.IntRange(1, 100_000), default=None,
              help="Events posted at once before --event-qps applies. [default: 50]")
@click.option("--no-reservation", is_flag=True,
              help="Plain best-effort FIFO: the first waiting gang of whole UltraServers does "
                   "not reserve the UltraServers it waits for (see docs/operator.md).")
@click.option("--no-moves", is_flag=True,
              help="Never move a running job to make room for a job within its tenant "
                   "queue's unused quota (see docs/queues.md, Moves).")
@click.option("--queue-stretch", type=FiniteFloat(0, 1_000_000), default=None,
              help="Inside a priority, queue by target start = creation + STRETCH x the "
              "job's predicted run time (work.durationSeconds; 24 h when absent); gangs of "
              "over half the largest UltraServer (73+ chips on Gen2) by creation. 0 = "
              "arrival order (docs/operator.md). [default: 10]")
@click.option("--ultraservers-from-nodes", is_flag=True,
              help="Create, update and delete UltraServers from the labels of Trainium Nodes.")
@click.option("--ultraserver-label", default=None, metavar="KEY",
              help="Node label holding the UltraServer id. [default: ultraplane.dev/ultraserver]")
@click.option("--server-index-label", default=None, metavar="KEY",
              help="Node label holding the server index, else by node name. "
              "[default: ultraplane.dev/server-index]")
@click.option("--launch-pods/--no-launch-pods", default=True, show_default=True,
              help="Run each admitted job that has spec.template as pods on the Nodes of its "
              "chips (docs/operator.md, Pods).")
@click.option("--pod-grace-seconds", type=click.IntRange(0, 86_400), default=120,
              show_default=True,
              help="Grace period of a deleted pod (preemption, restart, deletion) when its "
              "template sets no terminationGracePeriodSeconds: the time a checkpoint gets.")
@click.option("--launch-backlog-seconds", type=FiniteFloat(0, 3600), default=None,
              help="Hold admissions while the pod creates already queued would take longer "
              "than this at the rate the API server answers them (0 = never hold; "
              "docs/operator.md, Pods). [default: 2]")
@click.option("--cluster-domain", default="svc", show_default=True,
              help="DNS suffix after <namespace> in the coordinator address, e.g. "
              "svc.cluster.local.")
@click.option("--autoscale-seconds", type=FiniteFloat(0, 3600), default=None,
              help="Seconds between reads of autoscaled InferenceJobs' load (0: no planner "
                   "loop). [default: 30]")
@click.option("--prometheus-url", metavar="URL", default=None,
              help="Read the model servers' metrics from this Prometheus server's HTTP API "
                   "instead of scraping the pods (docs/autoscaling.md lists the queries).")
@click.option("--prometheus-selector", metavar="LABELS", default=None,
              help="Label matchers of one job's series, {namespace} and {name} substituted. "
                   "[default: namespace=\"{namespace}\",pod=~\"{name}-.+\"]")
@cluster_options
@log_level_option(default="info")
def operator(namespaces: tuple[str, ...], all_namespaces: bool, lease: str | None,
             standalone: bool, lease_namespace: str, fleet: str | None, liveness: str | None, concurrency: int,
             no_events: bool, event_qps: float | None, event_burst: int | None,
             no_reservation: bool, no_moves: bool, queue_stretch: float | None, ultraservers_from_nodes: bool, ultraserver_label: str | None,
             server_index_label: str | None, launch_pods: bool, pod_grace_seconds: int,
             launch_backlog_seconds: float | None, cluster_domain: str,
             autoscale_seconds: float | None, prometheus_url: str | None,
             prometheus_selector: str | None, kubeconfig: str | None, kube_context: str | None) -> None:
    """Run the Kubernetes operator (kopf): admission queue, gang placement, preemption."""
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces cannot be used together.")
    if lease and standalone:
        raise click.UsageError("--peering and --standalone cannot be used together.")
    access = ClusterAccess(kubeconfig, kube_context)
    try:  # no cluster: one sentence and exit 2, not kopf's retries every minute
        connect(access)
    except ClusterUnavailable as exc:
        exit_unavailable(exc)
    import os

    import kopf

    # read at the import of handlers, which registers the pod and Node watches when on
    os.environ["ULTRAPLANE_LAUNCH_PODS"] = "1" if launch_pods else "0"
    from ultraplane.operator import handlers

    handlers.CONFIG.access = access
    handlers.CONFIG.namespaces = list(namespaces)
    handlers.CONFIG.lease = lease
    handlers.CONFIG.lease_namespace = lease_namespace
    handlers.CONFIG.fleet = fleet
    handlers.CONFIG.concurrency = concurrency
    handlers.CONFIG.events = not no_events
    if event_qps is not None:  # or ULTRAPLANE_EVENT_QPS / ULTRAPLANE_EVENT_BURST
        handlers.CONFIG.event_qps = event_qps
    if event_burst is not None:
        handlers.CONFIG.event_burst = event_burst
    if no_reservation:  # or ULTRAPLANE_RESERVATION=0
        handlers.CONFIG.reservation = False
    if no_moves:  # or ULTRAPLANE_MOVES=0
        handlers.CONFIG.moves = False
    if queue_stretch is not None:  # or ULTRAPLANE_QUEUE_STRETCH
        handlers.CONFIG.queue_stretch = queue_stretch
    if ultraservers_from_nodes:  # or ULTRAPLANE_ULTRASERVERS_FROM_NODES=1, read at import
        handlers.CONFIG.ultraservers_from_nodes = True
        handlers.watch_nodes()
    handlers.CONFIG.launch_pods = launch_pods
    handlers.CONFIG.pod_grace_seconds = pod_grace_seconds
    if launch_backlog_seconds is not None:  # or ULTRAPLANE_LAUNCH_BACKLOG_SECONDS
        handlers.CONFIG.launch_backlog_seconds = launch_backlog_seconds
    handlers.CONFIG.cluster_domain = cluster_domain
    if autoscale_seconds is not None:  # or ULTRAPLANE_AUTOSCALE_SECONDS
        handlers.CONFIG.autoscale_seconds = autoscale_seconds
    if prometheus_url:  # or ULTRAPLANE_PROMETHEUS_URL
        handlers.CONFIG.prometheus_url = prometheus_url
    if prometheus_selector:
        handlers.CONFIG.prometheus_selector = prometheus_selector
    if handlers.CONFIG.launch_pods:
        handlers.watch_pods()
    handlers.CONFIG.ultraserver_label = ultraserver_label or handlers.CONFIG.ultraserver_label
    handlers.CONFIG.server_index_label = server_index_label or handlers.CONFIG.server_index_label
    # Logging is set by --log-level (ultraplane.commands.logs), kopf's and asyncio's kept at warning
    # unless debug. Not `kopf.configure`: it adds a second root handler (every line twice).
    kopf.run(standalone=True, clusterwide=not namespaces, namespaces=list(namespaces),
             liveness_endpoint=liveness)
