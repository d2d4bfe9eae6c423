"""`ultraplane model-server` and `ultraplane load-generator`: simulated serving on a real cluster.

Thin on purpose, like `cli`: parse and check the options (exit 2 with a sentence naming the
option), build the server or the client (`replicaservers`, `loadgenerators`), run it until
SIGTERM. The model server is the container of an InferenceJob's pod template; the load
generator is a pod of its own pointed at the job's headless Service (docs/autoscaling.md).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import click

from ultraplane.commands.logs import log_level_option
from ultraplane.commands.paramtypes import FiniteFloat

log = logging.getLogger("ultraplane.simulator")


def _stop_on_signals(stop: threading.Event) -> None:
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())


@click.command("model-server")
@click.option("--model", required=True, metavar="NAME",
              help="The language model served, by catalogue name (as the InferenceJob's "
                   "spec.model.name), e.g. llama-3-8b.")
@click.option("--parameters-billions", type=FiniteFloat(0, 100_000, min_open=True), default=None,
              help="For a model not in the catalogue: its size; the nearest catalogued model "
                   "stands in.")
@click.option("--chips", type=click.IntRange(1, 1024), envvar="ULTRAPLANE_TOTAL_CHIPS",
              required=True,
              help="Chips of this replica (the operator sets ULTRAPLANE_TOTAL_CHIPS in the "
                   "replica's pods). [env: ULTRAPLANE_TOTAL_CHIPS]")
@click.option("--profile", default="trn3-gen2", show_default=True,
              help="Hardware profile of the chips (as the InferenceJob's spec.profile).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="Port of /requests, /metrics and /health (name it `metrics` in the pod "
                   "template, where the operator scrapes it).")
@click.option("--tick-seconds", type=FiniteFloat(0.05, 60), default=1.0, show_default=True,
              help="Seconds between accountings of the requests that arrived.")
@log_level_option(default="info")
def model_server(model: str, parameters_billions: float | None, chips: int, profile: str,
                 host: str, port: int, tick_seconds: float) -> None:
    """Run a simulated model server: vLLM's metrics of the requests POSTed to it."""
    from ultraplane.simulator.replicaservers import ReplicaServer

    from ultraplane.serving.replicas import replica_for

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        replica = replica_for(model, chips=chips, profile=profile, parameters_b=parameters_billions)
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(f"no replica of {model} on {chips} {profile} chip(s): {exc}",
                                 param_hint="--model/--chips/--profile") from None
    try:
        server = ReplicaServer(replica, host=host, port=port, tick_s=tick_seconds, clock=time.time)
    except OSError as exc:
        raise click.BadParameter(f"cannot listen on {host}:{port}: {exc.strerror}",
                                 param_hint="--host/--port") from None
    _stop_on_signals(server.stopped)
    log.info("model server for %s on %d %s chip(s) listening on %s:%d", replica.model.name,
             chips, profile, host, server.port)
    server.serve()


@click.command("load-generator")
@click.option("--trace", "trace_path", required=True,
              type=click.Path(path_type=Path, dir_okay=False, exists=True), metavar="CSV",
              help="The request trace to replay (Azure CSV: TIMESTAMP, ContextTokens, "
                   "GeneratedTokens); it loops when it ends.")
@click.option("--rate-steps", default="0:1", show_default=True, metavar="S:X,...",
              help="The trace's rate multiple from each second of the replay on, e.g. "
                   "0:1,300:4,900:1.")
@click.option("--target", required=True, metavar="NAME",
              help="DNS name of the model servers: an InferenceJob's headless Service, "
                   "NAME.NAMESPACE.svc, resolves to each of its replica pods.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="The model servers' port.")
@click.option("--tick-seconds", type=FiniteFloat(0.05, 60), default=1.0, show_default=True,
              help="Seconds between offers of the requests due.")
@log_level_option(default="info")
def load_generator(trace_path: Path, rate_steps: str, target: str, port: int,
                   tick_seconds: float) -> None:
    """Offer a request trace to model servers, spread over the addresses of --target."""
    from ultraplane.simulator.loadgenerators import LoadGenerator, http_post, resolver

    from ultraplane.serving.requesttraces import RateSteps, RequestTrace

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        steps = RateSteps.parse(rate_steps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rate-steps") from None
    try:
        trace = RequestTrace.load(trace_path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trace") from None
    stop = threading.Event()
    _stop_on_signals(stop)
    generator = LoadGenerator(trace, steps, resolve=resolver(target), post=http_post(port),
                              clock=time.time)
    log.info("offering %s at %s to %s:%d", trace_path, rate_steps, target, port)
    said: tuple[int, bool] | None = None
    while not stop.wait(tick_seconds):
        offer = generator.tick()
        now = (len(offer.sent), offer.dropped > 0)
        if now != said:  # a line when the replicas answering change, not every tick
            log.info("%d replica(s) answering%s: %s", len(offer.sent),
                     f", {offer.dropped} request(s) found none" if offer.dropped else "",
                     ", ".join(sorted(offer.sent)))
            said = now
