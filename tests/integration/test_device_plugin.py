"""The fake Neuron device plugin over the real gRPC wire, against a fake kubelet.

The kubelet's side is played here with the same typed bindings (`services.py`): a fake
Registration server on `kubelet.sock` in a temporary directory of unix sockets records every
Register, and a DevicePlugin client dials the plugin's socket as the kubelet does after a
registration. No kind, no kubelet binary. Every wait is on a condition with a deadline.
The last test reads a real Node's labels from the kube-apiserver tier.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from ultraplane.simulator.deviceplugin import services
from ultraplane.simulator.deviceplugin import v1beta1_pb2 as pb
from ultraplane.simulator.deviceplugins import PluginConfig, RegistrationRefused, run_plugin

from ultraplane.pods.neurondevices import NodeDevices, devices_for_node

DEADLINE_S = 20.0
SOCKET = "ultraplane-neuron.sock"


def wait_until(check: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    """Polls `check` until it holds (a condition with a deadline, not a fixed sleep)."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.01)


class FakeKubelet:
    """The kubelet's Registration service on `<dir>/kubelet.sock`, recording each Register."""

    def __init__(self, directory: Path, refuse: grpc.StatusCode | None = None) -> None:
        self.path = directory / services.KUBELET_SOCKET
        self.refuse = refuse
        self.requests: list[pb.RegisterRequest] = []
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers([services.registration_handler(self._register)])
        assert self._server.add_insecure_port(f"unix:{self.path}")
        self._server.start()

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()
        if self.refuse is not None:
            context.abort(self.refuse, f"resource {request.resource_name} is already taken")
        return pb.Empty()

    def registrations(self, count: int) -> list[pb.RegisterRequest]:
        """Waits until `count` Register calls have arrived; all of them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= count, DEADLINE_S):
                raise AssertionError(f"{len(self.requests)} registration(s), expected {count}")
            return list(self.requests)

    def stop(self, remove: bool = True) -> None:
        self._server.stop(None).wait()
        if remove and self.path.exists():
            self.path.unlink()


class Plugin:
    """`run_plugin` in a thread, with a source the test can change."""

    def __init__(self, directory: Path, devices: NodeDevices, **config: Any) -> None:
        self.devices = devices
        self.config = PluginConfig(plugin_dir=directory, socket_name=SOCKET,
                                   poll_s=config.pop("poll_s", 0.02), **config)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            run_plugin(self.config, lambda: self.devices, self.stop)
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "the plugin did not stop"


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Short, outside pytest's tmp_path: a unix socket address holds at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="up-dp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(plugin_dir)
    yield k
    k.stop()


@pytest.fixture
def plugin(plugin_dir: Path, kubelet: FakeKubelet) -> Iterator[Plugin]:
    p = Plugin(plugin_dir, devices_for_node("node-1", {
        "ultraplane.dev/ultraserver": "us-a", "ultraplane.dev/profile": "trn3-gen2"}))
    kubelet.registrations(1)
    yield p
    p.join()
    assert p.error is None, p.error


@pytest.fixture
def stub(plugin: Plugin) -> Iterator[services.DevicePluginStub]:
    """The kubelet's client of the plugin, dialled at the registered endpoint."""
    with grpc.insecure_channel(f"unix:{plugin.config.socket}") as channel:
        yield services.DevicePluginStub(channel)


def test_registers_the_neuron_resource_with_its_socket_name(
        plugin: Plugin, kubelet: FakeKubelet, plugin_dir: Path) -> None:
    (request,) = kubelet.registrations(1)
    assert request.version == "v1beta1"
    assert request.endpoint == SOCKET  # a file name in the directory, not a path
    assert request.resource_name == "aws.amazon.com/neuron"
    assert request.options.get_preferred_allocation_available is True
    assert request.options.pre_start_required is False
    assert (plugin_dir / SOCKET).is_socket()


def test_options_say_preferred_allocation_is_served(stub: services.DevicePluginStub) -> None:
    options = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert (options.get_preferred_allocation_available, options.pre_start_required) == (True, False)
    assert stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["neuron0"]),
                                  timeout=5) == pb.PreStartContainerResponse()


def test_list_and_watch_streams_the_servers_chips_healthy_then_each_change(
        plugin_dir: Path, kubelet: FakeKubelet) -> None:
    p = Plugin(plugin_dir, NodeDevices(4), resync_s=0.02)
    try:
        kubelet.registrations(1)
        with grpc.insecure_channel(f"unix:{p.config.socket}") as channel:
            stream = services.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=DEADLINE_S)
            first = next(stream)
            assert [(d.ID, d.health) for d in first.devices] == [
                ("neuron0", "Healthy"), ("neuron1", "Healthy"), ("neuron2", "Healthy"),
                ("neuron3", "Healthy")]
            p.devices = NodeDevices(2)  # the Node's labels changed: read at the next resync
            second = next(stream)
            assert [d.ID for d in second.devices] == ["neuron0", "neuron1"]
            stream.cancel()
    finally:
        p.join()
    assert p.error is None


def test_allocate_returns_the_env_of_each_containers_ids(stub: services.DevicePluginStub) -> None:
    request = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=["neuron3", "neuron2"]),
        pb.ContainerAllocateRequest(devices_ids=["neuron0"]),
    ])
    first, second = stub.Allocate(request, timeout=5).container_responses
    assert dict(first.envs) == {"AWS_NEURON_VISIBLE_DEVICES": "2,3",
                                "NEURON_RT_VISIBLE_CORES": "16-31",
                                "ULTRAPLANE_NEURON_DEVICES": "neuron2,neuron3"}
    assert dict(second.envs)["NEURON_RT_VISIBLE_CORES"] == "0-7"


def test_preferred_allocation_packs_the_chips(stub: services.DevicePluginStub) -> None:
    request = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=["neuron0", "neuron2", "neuron3"], allocation_size=2)])
    (answer,) = stub.GetPreferredAllocation(request, timeout=5).container_responses
    assert list(answer.deviceIDs) == ["neuron2", "neuron3"]


@pytest.mark.parametrize(("ids", "words"), [
    (["neuron4"], "unknown device id 'neuron4' (this node has neuron0..neuron3)"),
    (["neuron0", "neuron0"], "requested twice"),
    ([], "no device ids"),
])
def test_a_bad_allocate_is_a_grpc_error_and_the_plugin_keeps_serving(
        stub: services.DevicePluginStub, plugin: Plugin, ids: list[str], words: str) -> None:
    bad = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    with pytest.raises(grpc.RpcError) as caught:
        stub.Allocate(bad, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in str(caught.value.details())
    good = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=["neuron1"])])
    assert stub.Allocate(good, timeout=5).container_responses[0].envs[
        "AWS_NEURON_VISIBLE_DEVICES"] == "1"
    assert plugin.thread.is_alive()


def test_a_bad_preferred_allocation_is_a_grpc_error(stub: services.DevicePluginStub) -> None:
    bad = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=["neuron9"],
                                               allocation_size=1)])
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetPreferredAllocation(bad, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "neuron9" in str(caught.value.details())


def test_registers_again_when_the_kubelet_recreates_its_socket(
        plugin_dir: Path, kubelet: FakeKubelet, plugin: Plugin) -> None:
    kubelet.stop()  # the kubelet restarts: its socket goes, a new one comes
    again = FakeKubelet(plugin_dir)
    try:
        (request,) = again.registrations(1)
        assert (request.resource_name, request.endpoint) == ("aws.amazon.com/neuron", SOCKET)
        with grpc.insecure_channel(f"unix:{plugin.config.socket}") as channel:
            stream = services.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=DEADLINE_S)
            assert len(next(stream).devices) == 4  # the new socket serves
            stream.cancel()
    finally:
        again.stop()


def test_serves_and_registers_again_when_its_socket_is_deleted(
        plugin_dir: Path, kubelet: FakeKubelet, plugin: Plugin) -> None:
    # What a restarting kubelet does first: it empties the device-plugins directory.
    (plugin_dir / SOCKET).unlink()
    kubelet.registrations(2)
    wait_until((plugin_dir / SOCKET).is_socket, "the plugin's socket to come back")
    with grpc.insecure_channel(f"unix:{plugin.config.socket}") as channel:
        answer = services.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert answer.get_preferred_allocation_available


def test_waits_for_a_kubelet_that_is_not_up_yet(plugin_dir: Path) -> None:
    p = Plugin(plugin_dir, NodeDevices(4))
    try:
        wait_until((plugin_dir / SOCKET).is_socket, "the plugin to serve before the kubelet")
        late = FakeKubelet(plugin_dir)
        try:
            assert late.registrations(1)[0].resource_name == "aws.amazon.com/neuron"
        finally:
            late.stop()
    finally:
        p.join()
    assert p.error is None
    assert not (plugin_dir / SOCKET).exists()  # removed on the way out


def test_a_kubelet_that_refuses_the_registration_stops_the_plugin(plugin_dir: Path) -> None:
    refusing = FakeKubelet(plugin_dir, refuse=grpc.StatusCode.INVALID_ARGUMENT)
    try:
        p = Plugin(plugin_dir, NodeDevices(4))
        p.thread.join(DEADLINE_S)
        assert not p.thread.is_alive()
        assert isinstance(p.error, RegistrationRefused)
        assert str(p.error) == ("the kubelet refused to register aws.amazon.com/neuron "
                                "(INVALID_ARGUMENT: resource aws.amazon.com/neuron is already "
                                "taken)")
        assert not (plugin_dir / SOCKET).exists()
    finally:
        refusing.stop()


def _command(plugin_dir: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ultraplane.cli", "simulator", "device-plugin",
         "--plugin-dir", str(plugin_dir), "--poll-seconds", "0.05", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NODE_NAME": "", **(env or {})})


def test_the_command_exits_0_on_sigterm_and_removes_its_socket(
        plugin_dir: Path, kubelet: FakeKubelet) -> None:
    proc = _command(plugin_dir, "--chips", "4")
    try:
        (request,) = kubelet.registrations(1)
        assert request.resource_name == "aws.amazon.com/neuron"
        with grpc.insecure_channel(f"unix:{plugin_dir / SOCKET}") as channel:
            stream = services.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=DEADLINE_S)
            assert len(next(stream).devices) == 4
            proc.send_signal(signal.SIGTERM)  # with the kubelet's stream still open
            _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "stopped" in stderr and "Traceback" not in stderr
    assert not (plugin_dir / SOCKET).exists()


def test_the_command_says_why_the_kubelet_refused_it_and_exits_1(plugin_dir: Path) -> None:
    refusing = FakeKubelet(plugin_dir, refuse=grpc.StatusCode.ALREADY_EXISTS)
    try:
        proc = _command(plugin_dir, "--chips", "4")
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        refusing.stop()
    assert proc.returncode == 1
    assert "Error: the kubelet refused to register aws.amazon.com/neuron (ALREADY_EXISTS" in stderr
    assert "Traceback" not in stderr


# --- the Node's labels from a real API server (the kube tier) ---------------------------------

def _node(kube_env: Any, name: str, labels: dict[str, str]) -> None:
    import json

    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    kube_env.kubectl("create", "-f", "-", input=json.dumps(body))


def test_the_command_advertises_what_its_nodes_labels_say(
        kube_env: Any, plugin_dir: Path, kubelet: FakeKubelet) -> None:
    import uuid

    server = f"dp-{uuid.uuid4().hex[:8]}"
    _node(kube_env, server, {"ultraplane.dev/ultraserver": "us-dp",
                             "ultraplane.dev/profile": "trn3-gen2"})
    env = {**kube_env.env(), "KUBECONFIG": str(kube_env.kubeconfig), "NODE_NAME": server}
    proc = _command(plugin_dir, env=env)
    try:
        kubelet.registrations(1)
        with grpc.insecure_channel(f"unix:{plugin_dir / SOCKET}") as channel:
            stream = services.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=DEADLINE_S)
            assert [d.ID for d in next(stream).devices] == [f"neuron{i}" for i in range(4)]
            stream.cancel()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, stderr
    assert f"Node {server} is a trn3-gen2 server of UltraServer us-dp: 4 chips" in stderr
    kube_env.kubectl("delete", "node", server)

    missing = _command(plugin_dir, env={**env, "NODE_NAME": "no-such-node"})
    _, stderr = missing.communicate(timeout=DEADLINE_S)
    assert missing.returncode == 1
    assert "Error: cannot read Node no-such-node: not found" in stderr
