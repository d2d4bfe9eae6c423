"""Topology: levels, ids, fleets, EKS network labels and cluster files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ultraplane.hardware.clusterfiles import ClusterFileError, load_cluster_file
from ultraplane.hardware.topology import (
    CLUSTER,
    RACK,
    SERVER,
    ULTRASERVER,
    Level,
    UltraServer,
    build_fleet,
    network_from_labels,
    parse_level,
)
from ultraplane.ids import chip_id, parse_chip_id, parse_local_ref


@pytest.mark.parametrize(("text", "level"), [
    ("server", SERVER), ("rack", RACK), ("UltraServer", ULTRASERVER), ("block", Level(3)),
    ("network-1", Level(3)), ("network-2", Level(4)), ("cluster", CLUSTER),
])
def test_parse_level(text: str, level: Level) -> None:
    assert parse_level(text) == level
    assert parse_level(level.name) == level


@pytest.mark.parametrize("bad", ["pod", "network-0", "network-x", ""])
def test_unknown_level_names_itself(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown topology level"):
        parse_level(bad)


def test_levels_are_ordered_nearest_first() -> None:
    assert SERVER < RACK < ULTRASERVER < parse_level("network-1") < parse_level("network-2") < CLUSTER


def test_chip_ids_round_trip_and_bad_ids_explain() -> None:
    assert chip_id("gen2-0007", 3, 1) == "gen2-0007/s03/c01"
    assert parse_chip_id("gen2-0007/s03/c01") == ("gen2-0007", 3, 1)
    assert parse_local_ref("s35/c03") == (35, 3)
    with pytest.raises(ValueError, match="not of the form"):
        parse_chip_id("gen2-0007:3:1")


def test_build_fleet_names_and_blocks() -> None:
    topo = build_fleet("trn3-gen2", 20)
    assert len(topo) == 20 and topo.chip_count == 20 * 144
    assert topo.ultraservers[0].name == "gen2-0000"
    assert topo.ultraservers[17].network == ("block-001",)
    assert topo.ultraserver("gen2-0015").network == ("block-000",)
    with pytest.raises(KeyError, match="gen2-9999"):
        topo.ultraserver("gen2-9999")


def test_eks_labels_highest_layer_is_nearest() -> None:
    labels = {
        "topology.k8s.aws/network-node-layer-1": "nn-top",
        "topology.k8s.aws/network-node-layer-3": "nn-block",
        "topology.k8s.aws/network-node-layer-2": "nn-mid",
        "other": "x",
    }
    assert network_from_labels(labels) == ("nn-block", "nn-mid", "nn-top")


def test_ultraserver_validates_health_refs() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        UltraServer("u", "trn3-gen2", failed_chips=frozenset({"s36/c00"}))
    with pytest.raises(ValueError, match="cordoned server 40"):
        UltraServer("u", "trn3-gen2", cordoned_servers=frozenset({40}))


def test_cluster_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "ultraservers:\n"
        "  - {name: a, profile: trn3-gen2, network: [block-0], failedChips: [s00/c01]}\n"
        "  - fleet: {profile: trn2, count: 2}\n"
        "allocations:\n"
        "  ns/job: [a/s01, a/s02/c00]\n"
    )
    cluster = load_cluster_file(path)
    assert [u.name for u in cluster.topology.ultraservers] == ["a", "trn2-0000", "trn2-0001"]
    assert cluster.topology.ultraserver("a").failed_chips == {"s00/c01"}
    assert len(cluster.allocations["ns/job"]) == 5


@pytest.mark.parametrize(("text", "field"), [
    ("ultraservers: [{name: a}]", "ultraservers[0].profile"),
    ("ultraservers: [{name: a, profile: trn9}]", "ultraservers[0]"),
    ("ultraservers: [{name: a, profile: trn2}]\nallocations: {j: [b/s00/c00]}", "allocations.j[0]"),
    ("ultraservers: [{name: a, profile: trn2, cordonedServers: 3}]", "cordonedServers"),
    ("ultraservers: [", "not valid YAML"),
    ("hello: 1", "ultraservers"),
])
def test_cluster_file_errors_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_cluster_file(path)


def test_job_keys_carry_the_kind() -> None:
    from ultraplane.ids import job_key, kind_of_job_key

    assert job_key("TrainingJob", "ns", "x") == "tj/ns/x"
    assert job_key("InferenceJob", "ns", "x") == "ij/ns/x"
    assert kind_of_job_key("ij/ns/x#1") == "InferenceJob"
    assert kind_of_job_key(job_key("TrainingJob", "ns", "x")) == "TrainingJob"


def test_levels_and_fleet_sizes_are_bounded() -> None:
    from ultraplane.hardware.topology import MAX_ULTRASERVERS, level_problem

    fleet = build_fleet("trn3-gen2", 2)  # one network layer: block-000
    assert level_problem(fleet, parse_level("network-1")) is None
    assert level_problem(fleet, parse_level("cluster")) is None
    assert level_problem(fleet, parse_level("rack")) is None
    assert "network-2 is not a level of this fleet" in str(level_problem(fleet, parse_level("network-2")))
    for absurd in ("network-99999999999", "network-0", "network-17", "network-\u0661"):
        with pytest.raises(ValueError, match="unknown topology level"):
            parse_level(absurd)
    with pytest.raises(ValueError, match=f"1..{MAX_ULTRASERVERS}"):
        build_fleet("trn3-gen2", 99_999_999)
