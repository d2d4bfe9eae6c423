"""The fake AWS Neuron device plugin: a kind Node's kubelet sees a Trainium server's chips.

Why a real device plugin rather than patching Node capacity: the point is that the real
kube-scheduler and kubelet do their own work on `aws.amazon.com/neuron`, i.e. count it, fit
pods to it, pick device ids for each container and ask the plugin for the container's
environment, exactly as on EKS with AWS's Neuron device plugin. So this speaks the kubelet's
device plugin API v1beta1 over gRPC on a unix socket in the kubelet's device-plugins
directory, and registers with the kubelet's `kubelet.sock` there. What it advertises and the
environment it returns are decided by the pure `ultraplane.pods.neurondevices`; this module is the
socket and the lifecycle:

  serve our socket -> Register with the kubelet -> watch both sockets, every `poll_s`:
    our socket removed (the kubelet wipes the directory when it restarts), or kubelet.sock
    recreated -> stop the server and start over (a new socket, a new registration);
    every `resync_s` re-read the device count and stream it if it changed;
  the `stop` event (SIGTERM) -> stop the server, remove our socket, return.

A kubelet that is not up yet (no kubelet.sock, or it does not answer) is retried with backoff;
a kubelet that answers with an error refuses the plugin for good (the API says a plugin then
exits): `RegistrationRefused`.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from ultraplane.simulator.deviceplugin import services
from ultraplane.simulator.deviceplugin import v1beta1_pb2 as pb

from ultraplane import kubeclients
from ultraplane.kubeclients import ClusterAccess
from ultraplane.pods.neurondevices import (
    ENV_DEVICE_IDS,
    HEALTHY,
    PLUGIN_DIR,
    PLUGIN_SOCKET,
    RESOURCE_NAME,
    DeviceRequestError,
    NodeDevices,
    allocate_env,
    devices_for_node,
    preferred_ids,
)
from ultraplane.pods.nodelabels import DEFAULT_LABELS, NodeLabels

log = logging.getLogger("ultraplane.simulator.deviceplugin")

MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

Identity = tuple[int, int, int]  # st_dev, st_ino, st_ctime_ns: a recreated file differs


class PluginError(RuntimeError):
    """The plugin cannot run; the message is one sentence for the operator of the node."""


class RegistrationRefused(PluginError):
    """The kubelet answered Register with an error."""


@dataclass(frozen=True)
class PluginConfig:
    plugin_dir: Path = Path(PLUGIN_DIR)
    socket_name: str = PLUGIN_SOCKET
    resource_name: str = RESOURCE_NAME
    poll_s: float = 1.0
    resync_s: float = 60.0  # 0: never re-read the device count
    register_timeout_s: float = 5.0

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / services.KUBELET_SOCKET

    def check(self) -> None:
        if "/" in self.socket_name or self.socket_name in ("", ".", "..", services.KUBELET_SOCKET):
            raise PluginError(f"the socket name {self.socket_name!r} must be a plain file name "
                              f"other than {services.KUBELET_SOCKET}")
        if len(os.fsencode(self.socket)) > MAX_SOCKET_PATH:
            raise PluginError(f"the socket path {self.socket} is longer than the "
                              f"{MAX_SOCKET_PATH} bytes a unix socket address holds")
        if not self.plugin_dir.is_dir():
            raise PluginError(f"the device plugin directory {self.plugin_dir} does not exist "
                              "(mount the kubelet's /var/lib/kubelet/device-plugins there)")


def identity(path: Path) -> Identity | None:
    """Which file `path` is now, if it is a socket; None when absent or not a socket."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None


class Devices:
    """The advertised devices, shared by every ListAndWatch stream: `set` wakes them all."""

    def __init__(self, devices: NodeDevices) -> None:
        self._cond = threading.Condition()
        self._devices = devices
        self._version = 0
        self._closed = False

    def get(self) -> NodeDevices:
        with self._cond:
            return self._devices

    def set(self, devices: NodeDevices) -> bool:
        """Replace the devices; whether the advertised list changed."""
        with self._cond:
            changed = devices.ids != self._devices.ids
            self._devices = devices
            if changed:
                self._version += 1
                self._cond.notify_all()
            return changed

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def newer(self, version: int, alive: Callable[[], bool]) -> tuple[int, NodeDevices] | None:
        """The devices once their version differs from `version`; None once closed or `alive`
        says the caller is gone (a `wake` makes it look again)."""
        with self._cond:
            while not self._closed and alive() and self._version == version:
                self._cond.wait()
            if self._closed or not alive():
                return None
            return self._version, self._devices


class NeuronDevicePlugin:
    """The `v1beta1.DevicePlugin` service over `Devices` (a `services.DevicePluginServicer`)."""

    def __init__(self, devices: Devices) -> None:
        self.devices = devices

    def GetDevicePluginOptions(self, request: pb.Empty,
                               context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty,
                     context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        context.add_callback(self.devices.wake)  # a cancelled stream stops waiting at once
        version = -1
        while (got := self.devices.newer(version, context.is_active)) is not None:
            version, devices = got
            log.info("advertising %d device(s) as %s", devices.count, RESOURCE_NAME)
            yield pb.ListAndWatchResponse(
                devices=[pb.Device(ID=i, health=HEALTHY) for i in devices.ids])

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        devices = self.devices.get()
        answers = []
        for ask in request.container_requests:
            try:
                ids = preferred_ids(list(ask.available_deviceIDs),
                                    list(ask.must_include_deviceIDs), ask.allocation_size, devices)
            except DeviceRequestError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            answers.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=answers)

    def Allocate(self, request: pb.AllocateRequest,
                 context: grpc.ServicerContext) -> pb.AllocateResponse:
        devices = self.devices.get()
        answers = []
        for ask in request.container_requests:
            try:
                env = allocate_env(list(ask.devices_ids), devices)
            except DeviceRequestError as exc:
                log.warning("Allocate refused: %s", exc)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            log.info("allocated %s", env[ENV_DEVICE_IDS])
            answers.append(pb.ContainerAllocateResponse(envs=env))
        return pb.AllocateResponse(container_responses=answers)

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


@dataclass
class _Serving:
    server: grpc.Server
    pool: futures.ThreadPoolExecutor
    socket: Identity

    def stop(self) -> None:
        self.server.stop(grace=0.5).wait(5.0)
        self.pool.shutdown(wait=False)  # grpc leaves the pool it was given running


def _serve(config: PluginConfig, plugin: NeuronDevicePlugin) -> _Serving:
    """A started server on a fresh socket file, and which file that is."""
    path = config.socket
    if path.exists() or path.is_symlink():
        path.unlink()  # left by a previous run: binding would fail
    pool = futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="neuron-plugin")
    server = grpc.server(pool)
    server.add_generic_rpc_handlers([services.device_plugin_handler(plugin)])
    try:
        bound = server.add_insecure_port(f"unix:{path}")
    except RuntimeError as exc:
        bound, why = 0, f": {exc}"
    else:
        why = ""
    if not bound:
        pool.shutdown(wait=False)
        raise PluginError(f"cannot listen on {path}{why}")
    server.start()
    serving = _Serving(server, pool, identity(path) or (0, 0, 0))
    if serving.socket == (0, 0, 0):
        serving.stop()
        raise PluginError(f"the socket {path} vanished as soon as it was made")
    return serving


def _register(config: PluginConfig, stop: threading.Event) -> Identity | None:
    """Register with the kubelet, waiting for it; which kubelet.sock answered (None: stopped)."""
    request = pb.RegisterRequest(
        version=services.VERSION, endpoint=config.socket_name,
        resource_name=config.resource_name,
        options=pb.DevicePluginOptions(pre_start_required=False,
                                       get_preferred_allocation_available=True))
    delay = min(0.05, config.poll_s)
    waited = False
    while not stop.is_set():
        kubelet = identity(config.kubelet_socket)
        if kubelet is not None:
            try:
                with grpc.insecure_channel(f"unix:{config.kubelet_socket}") as channel:
                    services.RegistrationStub(channel).Register(
                        request, timeout=config.register_timeout_s)
                return kubelet
            except grpc.RpcError as exc:
                if exc.code() not in _RETRYABLE:
                    raise RegistrationRefused(
                        f"the kubelet refused to register {config.resource_name} "
                        f"({exc.code().name}: {exc.details()})") from None
        if not waited:
            log.info("waiting for the kubelet at %s", config.kubelet_socket)
            waited = True
        stop.wait(delay)
        delay = min(delay * 2, config.poll_s)
    return None


def _watch(config: PluginConfig, ours: Identity, kubelet: Identity, stop: threading.Event,
           devices: Devices, source: Callable[[], NodeDevices]) -> str | None:
    """Until something means starting over (the reason) or `stop` (None)."""
    resync_at = time.monotonic() + config.resync_s
    while not stop.wait(config.poll_s):
        if identity(config.socket) != ours:
            return f"our socket {config.socket} was removed (the kubelet restarted)"
        if identity(config.kubelet_socket) != kubelet:
            return f"{config.kubelet_socket} was recreated (the kubelet restarted)"
        if config.resync_s and time.monotonic() >= resync_at:
            resync_at = time.monotonic() + config.resync_s
            try:
                fresh = source()
            except Exception as exc:  # an API hiccup keeps the last count, never stops the plugin
                log.warning("could not re-read the device count, keeping %d: %s",
                            devices.get().count, exc)
                continue
            if devices.set(fresh):
                log.info("device count changed: %s", fresh.reason)
    return None


def run_plugin(config: PluginConfig, source: Callable[[], NodeDevices],
               stop: threading.Event) -> None:
    """Serve and register until `stop` is set; `source` says which devices to advertise."""
    config.check()
    first = source()
    log.info("%s", first.reason)
    devices = Devices(first)
    plugin = NeuronDevicePlugin(devices)
    try:
        while not stop.is_set():
            serving = _serve(config, plugin)
            try:
                kubelet = _register(config, stop)
                if kubelet is None:
                    break
                log.info("registered %s at %s with the kubelet (%d device(s))",
                         config.resource_name, config.socket, devices.get().count)
                reason = _watch(config, serving.socket, kubelet, stop, devices, source)
                if reason is not None:
                    log.info("%s: serving and registering again", reason)
            finally:
                devices.wake()
                serving.stop()
                if identity(config.socket) == serving.socket:
                    config.socket.unlink()
    finally:
        devices.close()
    log.info("stopped")


def node_source(node: str, keys: NodeLabels = DEFAULT_LABELS,
                access: ClusterAccess | None = None) -> Callable[[], NodeDevices]:
    """Reads the labels of the Node `node` (the pod's own, through the downward API) on each
    call; `ClusterUnavailable` when there is no cluster to ask (the one client set-up,
    `ultraplane/kubeclients.py`), and a first read that fails is a `PluginError` naming the
    cause."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api: Any = client.CoreV1Api(kubeclients.connect(access))

    def read() -> NodeDevices:
        body = api.read_node(node)
        labels: dict[str, str] = dict(body.metadata.labels or {})
        return devices_for_node(node, labels, keys=keys)

    try:
        read()
    except ApiException as exc:
        why = {403: "forbidden: the ServiceAccount needs get on nodes",
               404: "not found: NODE_NAME must be the pod's spec.nodeName"}.get(
                   exc.status, f"{exc.status} {exc.reason}")
        raise PluginError(f"cannot read Node {node}: {why}") from None
    except Exception as exc:  # unreachable API server, bad certificate: said in one sentence
        raise PluginError(f"cannot read Node {node}: {exc}") from None
    return read
