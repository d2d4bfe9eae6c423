"""What a Trainium server's Neuron device plugin tells its kubelet, as data in, data out.

Why pure: the simulator's fake device plugin (`simulator/deviceplugins.py`) makes a kind
cluster's Nodes look like Trainium servers to the real kube-scheduler and kubelet. The parts
worth testing with tables are decisions, not gRPC: how many chips a Node advertises (from the
same labels `--ultraservers-from-nodes` reads), the ids they get, the environment `Allocate`
gives a container for the ids the kubelet picked, and which ids to prefer. They live here; the
server only moves these values over the wire.

The contract (docs/install.md, "A Trainium-like kind cluster"):
  - a Node labelled as one server of an UltraServer (`NodeLabels.ultraserver`, or the Neuron
    device plugin's UltraServer id, `nodelabels.membership`) whose profile is
    known (`ultraplane/pods/nodelabels.py`) advertises the profile's `chips_per_server` devices; any
    other Node advertises none. An explicit chip count overrides both;
  - device ids are `neuron0` .. `neuron{N-1}`, always `Healthy` (the fake chips never fail here;
    the simulator's fault plans are where chips fail);
  - `Allocate` of some ids sets `AWS_NEURON_VISIBLE_DEVICES` (the chip indexes, as the real
    plugin does for `aws.amazon.com/neuron`), `NEURON_RT_VISIBLE_CORES` (their NeuronCores in
    the node's numbering: chip i holds cores i*k .. i*k+k-1) and `ULTRAPLANE_NEURON_DEVICES` (the
    ids, so a workload can tell it got fake chips). No device files are mounted: there are none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ultraplane.hardware.profiles import UnknownProfileError, load_profile
from ultraplane.pods.launches import NEURON_RESOURCE, index_core_range
from ultraplane.pods.nodelabels import DEFAULT_LABELS, NodeLabels, labelled_profile, membership

RESOURCE_NAME = NEURON_RESOURCE
DEVICE_PREFIX = "neuron"
HEALTHY = "Healthy"
DEFAULT_CORES_PER_CHIP = 8  # every profile's chip (Trainium2, 3 and the projected 4)
MAX_CHIPS = 64  # the most chips a server of any profile may have (profiles.Profile)
# Where the kubelet looks for device plugin sockets, and the file name of ours there (the
# chart mounts the directory from the host).
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
PLUGIN_SOCKET = "ultraplane-neuron.sock"

ENV_VISIBLE_DEVICES = "AWS_NEURON_VISIBLE_DEVICES"
ENV_VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
ENV_DEVICE_IDS = "ULTRAPLANE_NEURON_DEVICES"

_DEVICE_ID = re.compile(rf"^{DEVICE_PREFIX}(0|[1-9][0-9]*)$")


class DeviceRequestError(ValueError):
    """A request names a device this node does not have (the message names it)."""


@dataclass(frozen=True)
class NodeDevices:
    """The devices one Node advertises, and the sentence saying why that many."""

    count: int
    cores_per_chip: int = DEFAULT_CORES_PER_CHIP
    reason: str = ""

    @property
    def ids(self) -> tuple[str, ...]:
        return device_ids(self.count)


def device_ids(count: int) -> tuple[str, ...]:
    return tuple(f"{DEVICE_PREFIX}{i}" for i in range(count))


def devices_for_node(node: str, labels: Mapping[str, str], *, keys: NodeLabels = DEFAULT_LABELS,
                     chips: int | None = None) -> NodeDevices:
    """How many chips the Node `node` with `labels` advertises; `chips` overrides the count."""
    profile_name = labelled_profile(labels, keys)
    profile = None
    if profile_name is not None:
        try:
            profile = load_profile(profile_name)
        except UnknownProfileError:
            profile = None
    cores = profile.chip.neuron_cores if profile is not None else DEFAULT_CORES_PER_CHIP
    if chips is not None:
        if not 0 <= chips <= MAX_CHIPS:
            raise ValueError(f"chips must be 0..{MAX_CHIPS}, got {chips}")
        return NodeDevices(chips, cores, f"{chips} chip(s) as given (--chips)")
    found = membership(labels, keys)
    if found is None:
        return NodeDevices(0, cores, f"Node {node} has no label {keys.ultraserver} (nor a Neuron "
                                     "UltraServer id): it is not a server of an UltraServer, "
                                     "so it advertises no chips")
    ultraserver = found.ultraserver
    if profile is None:
        return NodeDevices(0, cores, f"Node {node} of UltraServer {ultraserver} has no known "
                                     f"profile (label {keys.profile}="
                                     f"{labels.get(keys.profile, '')!r}), so it advertises "
                                     "no chips")
    return NodeDevices(profile.chips_per_server, cores,
                       f"Node {node} is a {profile.name} server of UltraServer {ultraserver}: "
                       f"{profile.chips_per_server} chips")


def device_index(device_id: str, count: int) -> int:
    """The chip index of `device_id` on a node of `count` devices."""
    match = _DEVICE_ID.match(device_id)
    if match is None or int(match.group(1)) >= count:
        known = f"{DEVICE_PREFIX}0..{DEVICE_PREFIX}{count - 1}" if count else "none"
        raise DeviceRequestError(f"unknown device id {device_id[:80]!r} (this node has {known})")
    return int(match.group(1))


def _indexes(ids: Iterable[str], count: int) -> list[int]:
    indexes: list[int] = []
    for device_id in ids:
        index = device_index(device_id, count)
        if index in indexes:
            raise DeviceRequestError(f"device id {device_id!r} is requested twice")
        indexes.append(index)
    return indexes


def allocate_env(ids: Sequence[str], devices: NodeDevices) -> dict[str, str]:
    """The environment of a container given the devices `ids` (the contract above)."""
    if not ids:
        raise DeviceRequestError("no device ids in the request")
    indexes = sorted(_indexes(ids, devices.count))
    return {
        ENV_VISIBLE_DEVICES: ",".join(str(i) for i in indexes),
        ENV_VISIBLE_CORES: index_core_range(indexes, devices.cores_per_chip),
        ENV_DEVICE_IDS: ",".join(f"{DEVICE_PREFIX}{i}" for i in indexes),
    }


def preferred_ids(available: Sequence[str], must_include: Sequence[str], size: int,
                  devices: NodeDevices) -> list[str]:
    """`size` ids from `available`, every `must_include` id among them, packed as tightly as
    the free chips allow (the narrowest span of indexes; ties: the lowest), so a container's
    chips stay adjacent and its NeuronCores one range when they can. Sorted by index."""
    free = sorted(_indexes(available, devices.count))
    must = _indexes(must_include, devices.count)
    if missing := [i for i in must if i not in free]:
        raise DeviceRequestError(f"must-include device {DEVICE_PREFIX}{missing[0]} is not "
                                 "among the available ones")
    if not len(must) <= size <= len(free):
        raise DeviceRequestError(f"cannot prefer {size} device(s) from {len(free)} available "
                                 f"with {len(must)} required")
    if size == 0:
        return []
    best: tuple[int, int, int] | None = None  # span, first and last position in `free`
    for a in range(len(free)):
        for b in range(a + size - 1, len(free)):  # the first b that holds every must is best
            if all(free[a] <= m <= free[b] for m in must):
                if best is None or free[b] - free[a] < best[0]:
                    best = (free[b] - free[a], a, b)
                break
    assert best is not None  # the whole free list is a window holding every must
    window = free[best[1]:best[2] + 1]
    chosen = list(must) + [i for i in window if i not in must][: size - len(must)]
    return [f"{DEVICE_PREFIX}{i}" for i in sorted(chosen)]
