"""What the fake Neuron device plugin advertises and returns (`ultraplane/pods/neurondevices.py`),
as tables; and the `ultraplane simulator device-plugin` command's bad input (exit 2)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from ultraplane.operator import nodes

from ultraplane.cli import main
from ultraplane.pods import nodelabels
from ultraplane.pods.neurondevices import (
    DeviceRequestError,
    NodeDevices,
    allocate_env,
    device_ids,
    devices_for_node,
    preferred_ids,
)

ROOT = Path(__file__).resolve().parents[2]
US = "ultraplane.dev/ultraserver"
PROFILE = "ultraplane.dev/profile"
TYPE = "node.kubernetes.io/instance-type"

# (labels, chips override, devices advertised, words of the reason)
COUNTS = [
    ({US: "us-a", PROFILE: "trn3-gen2"}, None, 4, "trn3-gen2 server of UltraServer us-a"),
    ({US: "us-a", PROFILE: "trn2"}, None, 16, "16 chips"),
    ({US: "us-a", TYPE: "trn3u.12xlarge"}, None, 4, "trn3-gen2"),  # profile from instance type
    ({US: "us-a", TYPE: "trn2u.48xlarge"}, None, 16, "trn2"),
    ({US: "us-a", PROFILE: "trn2", TYPE: "trn3u.12xlarge"}, None, 16, "trn2"),  # label wins
    ({US: "us-a"}, None, 0, "no known profile"),
    ({US: "us-a", PROFILE: "trn9"}, None, 0, "no known profile (label ultraplane.dev/profile='trn9')"),
    ({PROFILE: "trn3-gen2"}, None, 0, "has no label ultraplane.dev/ultraserver"),
    ({}, None, 0, "not a server of an UltraServer"),
    ({US: ""}, None, 0, "has no label"),
    ({}, 4, 4, "as given (--chips)"),  # the override needs no label
    ({US: "us-a", PROFILE: "trn3-gen2"}, 0, 0, "as given"),
    ({US: "us-a", PROFILE: "trn2"}, 2, 2, "as given"),
]


@pytest.mark.parametrize(("labels", "chips", "count", "reason"), COUNTS)
def test_device_count_from_the_nodes_labels(labels: dict[str, str], chips: int | None,
                                            count: int, reason: str) -> None:
    got = devices_for_node("node-1", labels, chips=chips)
    assert got.count == count and got.ids == device_ids(count)
    assert reason in got.reason
    assert got.cores_per_chip == 8


def test_the_ultraserver_label_key_is_configurable_like_the_operators() -> None:
    keys = nodelabels.NodeLabels(ultraserver="example.com/us")
    labels = {"example.com/us": "x", PROFILE: "trn3-gen2"}
    assert devices_for_node("n", labels, keys=keys).count == 4
    assert devices_for_node("n", labels).count == 0


def test_operator_discovery_reads_the_same_label_keys() -> None:
    # One definition for both adapters: the operator's names are the core's objects.
    assert nodes.NodeLabels is nodelabels.NodeLabels
    assert nodes.DEFAULT_LABELS is nodelabels.DEFAULT_LABELS
    assert nodes.INSTANCE_PROFILES is nodelabels.INSTANCE_PROFILES


def test_device_ids_are_neuron_and_the_chip_index() -> None:
    assert device_ids(4) == ("neuron0", "neuron1", "neuron2", "neuron3")
    assert device_ids(0) == ()


@pytest.mark.parametrize("chips", [-1, 65])
def test_a_chip_count_outside_the_profiles_range_is_refused(chips: int) -> None:
    with pytest.raises(ValueError, match=re.escape("chips must be 0..64")):
        devices_for_node("n", {}, chips=chips)


FOUR = NodeDevices(4)
SIXTEEN = NodeDevices(16)

# (devices of the node, requested ids, AWS_NEURON_VISIBLE_DEVICES, NEURON_RT_VISIBLE_CORES)
ENVS = [
    (FOUR, ["neuron0"], "0", "0-7"),
    (FOUR, ["neuron3"], "3", "24-31"),
    (FOUR, ["neuron1", "neuron0"], "0,1", "0-15"),  # sorted by index
    (FOUR, ["neuron0", "neuron1", "neuron2", "neuron3"], "0,1,2,3", "0-31"),
    (FOUR, ["neuron0", "neuron2"], "0,2", "0-7,16-23"),  # not adjacent: two ranges
    (SIXTEEN, ["neuron10", "neuron9", "neuron15"], "9,10,15", "72-87,120-127"),
    (NodeDevices(2, cores_per_chip=2), ["neuron1"], "1", "2-3"),
]


@pytest.mark.parametrize(("devices", "ids", "visible", "cores"), ENVS)
def test_allocate_env_names_the_chips_and_their_neuron_cores(
        devices: NodeDevices, ids: list[str], visible: str, cores: str) -> None:
    env = allocate_env(ids, devices)
    assert env == {"AWS_NEURON_VISIBLE_DEVICES": visible, "NEURON_RT_VISIBLE_CORES": cores,
                   "ULTRAPLANE_NEURON_DEVICES": ",".join(f"neuron{i}" for i in visible.split(","))}


# (requested ids, words of the error)
BAD_IDS = [
    (["neuron4"], "unknown device id 'neuron4' (this node has neuron0..neuron3)"),
    (["gpu0"], "unknown device id 'gpu0'"),
    (["neuron01"], "unknown device id 'neuron01'"),  # one spelling per chip
    (["neuron-1"], "unknown device id"),
    (["Neuron0"], "unknown device id"),
    (["neuron0", "neuron0"], "'neuron0' is requested twice"),
    ([], "no device ids"),
    (["x" * 500], "unknown device id 'xxxx"),
]


@pytest.mark.parametrize(("ids", "words"), BAD_IDS)
def test_a_bad_allocate_request_is_a_sentence(ids: list[str], words: str) -> None:
    with pytest.raises(DeviceRequestError, match=re.escape(words)) as caught:
        allocate_env(ids, FOUR)
    assert len(str(caught.value)) < 200


def test_a_node_without_devices_refuses_every_id() -> None:
    with pytest.raises(DeviceRequestError, match=r"this node has none"):
        allocate_env(["neuron0"], NodeDevices(0))


# The node's chips, free (o) or taken (x), then the request and the preferred ids.
#   chips  0 1 2 3
#   state  o o o o   size 2, must neuron2 -> neuron1,neuron2 (adjacent, lowest)
PREFERRED = [
    (["neuron0", "neuron1", "neuron2", "neuron3"], [], 2, ["neuron0", "neuron1"]),
    (["neuron3", "neuron1", "neuron0", "neuron2"], ["neuron2"], 2, ["neuron1", "neuron2"]),
    # chips 0 x 2 3: free 0,2,3 -> the adjacent pair 2,3
    (["neuron0", "neuron2", "neuron3"], [], 2, ["neuron2", "neuron3"]),
    # chips 0 1 x 3, must neuron3 -> 1 and 3 is the narrowest span holding chip 3
    (["neuron0", "neuron1", "neuron3"], ["neuron3"], 2, ["neuron1", "neuron3"]),
    (["neuron0", "neuron1"], ["neuron0", "neuron1"], 2, ["neuron0", "neuron1"]),
    (["neuron0", "neuron1"], [], 0, []),
]


@pytest.mark.parametrize(("available", "must", "size", "want"), PREFERRED)
def test_preferred_allocation_keeps_a_containers_chips_together(
        available: list[str], must: list[str], size: int, want: list[str]) -> None:
    assert preferred_ids(available, must, size, FOUR) == want


@pytest.mark.parametrize(("available", "must", "size", "words"), [
    (["neuron0", "neuron7"], [], 1, "unknown device id 'neuron7'"),
    (["neuron0"], ["neuron1"], 1, "must-include device neuron1 is not among the available"),
    (["neuron0"], [], 2, "cannot prefer 2 device(s) from 1 available"),
    (["neuron0", "neuron1"], ["neuron0", "neuron1"], 1, "with 2 required"),
    (["neuron0", "neuron1"], [], -1, "cannot prefer -1"),
])
def test_a_bad_preferred_allocation_request_is_a_sentence(
        available: list[str], must: list[str], size: int, words: str) -> None:
    with pytest.raises(DeviceRequestError, match=re.escape(words)):
        preferred_ids(available, must, size, FOUR)


def test_the_protobuf_floor_admits_the_generated_module() -> None:
    # An older protobuf runtime than the protoc that wrote v1beta1_pb2.py refuses to load it:
    # the dependency's floor must be that version (hack/gen-deviceplugin-proto.sh says so).
    generated = (ROOT / "simulator" / "deviceplugin" / "v1beta1_pb2.py").read_text()
    made_by = re.search(r"^# Protobuf Python Version: (\d+)\.(\d+)\.(\d+)$", generated, re.M)
    assert made_by is not None
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(re.search(r">=(\d+)\.(\d+)\.(\d+)", d) for d in deps if d.startswith("protobuf"))
    assert floor is not None
    assert tuple(map(int, floor.groups())) >= tuple(map(int, made_by.groups()))


# --- the command's bad input: exit 2 and one sentence, before any socket is made ------------

def run(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(main, ["simulator", "device-plugin", *args],
                              env={"NODE_NAME": "", **(env or {})})


@pytest.mark.parametrize(("args", "words"), [
    ((), "give --node-name (or set NODE_NAME from the downward API) to read the Node's "
         "labels, or --chips N"),
    (("--chips", "65"), "'--chips'"),
    (("--chips", "four"), "'--chips'"),
    (("--chips", "4", "--plugin-dir", "/nonexistent/device-plugins"),
     "the device plugin directory /nonexistent/device-plugins does not exist"),
    (("--chips", "4", "--socket-name", "kubelet.sock"), "must be a plain file name other than "
                                                       "kubelet.sock"),
    (("--chips", "4", "--socket-name", "a/b.sock"), "must be a plain file name"),
    (("--chips", "4", "--poll-seconds", "0"), "'--poll-seconds'"),
])
def test_bad_input_exits_2_with_a_sentence(args: tuple[str, ...], words: str,
                                           tmp_path: Path) -> None:
    res = run(*args)
    assert res.exit_code == 2, res.output  # type: ignore[attr-defined]
    assert words in res.output  # type: ignore[attr-defined]
    assert "Traceback" not in res.output  # type: ignore[attr-defined]


def test_a_socket_path_too_long_for_a_unix_address_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    res = run("--chips", "4", "--plugin-dir", str(deep))
    assert res.exit_code == 2  # type: ignore[attr-defined]
    assert "longer than the 107 bytes" in res.output  # type: ignore[attr-defined]


def test_simulator_without_a_subcommand_is_still_the_virtual_kubelet() -> None:
    res = CliRunner().invoke(main, ["simulator", "--help"])
    assert res.exit_code == 0
    assert "--time-scale" in res.output and "device-plugin" in res.output
