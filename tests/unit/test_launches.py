"""From allocation to pods (ultraplane.pods.launches) and from pods to the job (ultraplane.pods.outcomes).

Each case draws the allocation: one row per UltraServer, one cell per server, the digit the
chips the job holds on that server (`.` none). Nodes are named `node-<us>-<index>`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultraplane.ids import (
    ChipId,
    JobKey,
    ServerId,
    chip_id,
    chip_ranges,
    parse_chip_ranges,
    server_id,
)
from ultraplane.pods.launches import (
    NEURON_RESOURCE,
    JobRef,
    NoNodeError,
    core_range,
    dns_label,
    plan,
)
from ultraplane.pods.outcomes import PodState, outcome
from ultraplane.resources.podtemplates import check_template

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "llm"}},
    "spec": {"containers": [
        {"name": "train", "image": "trainer:1", "env": [{"name": "MASTER_PORT", "value": "1"},
                                                       {"name": "KEEP", "value": "me"}]},
        {"name": "sidecar", "image": "logs:1"}]},
}


def drawn(rows: dict[str, str]) -> list[ChipId]:
    """`{"us-a": "4.2"}`: 4 chips on s00, none on s01, 2 on s02 (chips from c00)."""
    return [chip_id(us, s, c) for us, row in rows.items() for s, cell in enumerate(row)
            if cell != "." for c in range(int(cell))]


def nodes_for(chips: list[ChipId]) -> dict[ServerId, str]:
    return {server_id(c.split("/")[0], int(c.split("/")[1][1:])):
            f"node-{c.split('/')[0]}-{int(c.split('/')[1][1:])}" for c in chips}


def job(kind: str = "TrainingJob", name: str = "llama", attempt: int = 1) -> JobRef:
    prefix = "tj" if kind == "TrainingJob" else "ij"
    return JobRef(JobKey(f"{prefix}/research/{name}"), kind, "research", name, "uid-1", attempt)


def env_of(body: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in body["spec"]["containers"][container]["env"]}


def test_one_pod_per_server_bound_to_its_node_with_its_chips() -> None:
    #   us-a: 4 4 . 2      (10 chips on three servers)
    chips = drawn({"us-a": "44.2"})
    launch = plan(job(), TEMPLATE, [chips], nodes_for(chips), cores_per_chip={"us-a": 8})
    assert [(p.rank, p.server, p.node, len(p.chips)) for p in launch.pods] == [
        (0, "us-a/s00", "node-us-a-0", 4), (1, "us-a/s01", "node-us-a-1", 4),
        (2, "us-a/s03", "node-us-a-3", 2)]
    body = launch.pods[2].body
    assert body["spec"]["nodeName"] == "node-us-a-3"
    main = body["spec"]["containers"][0]["resources"]
    assert main["limits"][NEURON_RESOURCE] == main["requests"][NEURON_RESOURCE] == "2"
    assert "resources" not in body["spec"]["containers"][1]  # devices add up: first only
    assert body["metadata"]["ownerReferences"] == [{
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob", "name": "llama",
        "uid": "uid-1", "controller": True}]
    assert body["metadata"]["labels"]["team"] == "llm"
    assert body["spec"]["restartPolicy"] == "Never"
    assert TEMPLATE["spec"]["containers"][0].get("resources") is None  # template untouched


def test_the_environment_of_a_rank() -> None:
    #   us-a: . . . . 4 4   us-b: 4      (rank 0 on us-a/s04)
    chips = drawn({"us-a": "....44", "us-b": "4"})
    launch = plan(job(), TEMPLATE, [chips], nodes_for(chips),
                  cores_per_chip={"us-a": 8, "us-b": 8}, cluster_domain="svc.cluster.local")
    env = env_of(launch.pods[2].body)
    coordinator = "llama-0.llama.research.svc.cluster.local"
    assert env["ULTRAPLANE_WORLD_SIZE"] == env["NNODES"] == "3"
    assert env["ULTRAPLANE_NODE_RANK"] == env["NODE_RANK"] == "2"
    assert env["ULTRAPLANE_LOCAL_CHIPS"] == "4" and env["ULTRAPLANE_TOTAL_CHIPS"] == "12"
    assert env["ULTRAPLANE_COORDINATOR_ADDR"] == env["MASTER_ADDR"] == coordinator
    assert env["MASTER_PORT"] == "62182" and env["NEURON_RT_ROOT_COMM_ID"] == f"{coordinator}:62182"
    assert env["ULTRAPLANE_SERVER"] == "us-b/s00" and env["ULTRAPLANE_ULTRASERVER"] == "us-b"
    assert env["ULTRAPLANE_ULTRASERVERS"] == "us-a,us-b"
    assert env["ULTRAPLANE_LOCAL_CHIP_IDS"] == ",".join(chip_id("us-b", 0, c) for c in range(4))
    assert env["ULTRAPLANE_CHIP_IDS"] == "us-a/s04-s05/c00-c03,us-b/s00/c00-c03"  # ranges
    assert parse_chip_ranges(env["ULTRAPLANE_CHIP_IDS"]) == sorted(chips)
    assert env["ULTRAPLANE_NEURON_CORES"] == "0-31"
    assert env["KEEP"] == "me"  # the template's own variables stay, ours replace theirs
    assert [e["value"] for e in launch.pods[2].body["spec"]["containers"][0]["env"]
            if e["name"] == "MASTER_PORT"] == ["62182"]
    assert env_of(launch.pods[2].body, 1)["NODE_RANK"] == "2"  # every container
    spec = launch.pods[0].body["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("llama-0", "llama")
    assert launch.service["spec"]["clusterIP"] == "None"
    assert launch.service["spec"]["publishNotReadyAddresses"] is True
    assert launch.service["spec"]["selector"] == {"ultraplane.dev/job-uid": "uid-1"}


def test_an_inference_job_has_one_group_per_replica_each_with_its_own_rank_0() -> None:
    #   replica 0 -> us-a: 4 4     replica 1 -> us-a: . . 4 4
    r0, r1 = drawn({"us-a": "44"}), drawn({"us-a": "..44"})
    launch = plan(job("InferenceJob", "chat"), TEMPLATE, [r0, r1], nodes_for(r0 + r1),
                  cores_per_chip={"us-a": 8})
    assert [(p.group, p.rank, p.server) for p in launch.pods] == [
        (0, 0, "us-a/s00"), (0, 1, "us-a/s01"), (1, 0, "us-a/s02"), (1, 1, "us-a/s03")]
    env = env_of(launch.pods[3].body)
    assert env["ULTRAPLANE_REPLICA"] == "1" and env["ULTRAPLANE_WORLD_SIZE"] == "2"
    assert env["ULTRAPLANE_COORDINATOR_ADDR"] == "chat-r1-0.chat.research.svc"
    assert [p.name for p in launch.pods] == ["chat-r0-0-a1", "chat-r0-1-a1", "chat-r1-0-a1",
                                             "chat-r1-1-a1"]


def test_a_server_without_a_node_is_named() -> None:
    chips = drawn({"us-a": "44"})
    nodes = nodes_for(chips[:4])
    with pytest.raises(NoNodeError, match="no Node for allocated server"):
        plan(job(), TEMPLATE, [chips], nodes, cores_per_chip={})
    with pytest.raises(NoNodeError, match="us-a/s01"):
        plan(job(), TEMPLATE, [chips], nodes, cores_per_chip={})


@pytest.mark.parametrize(("chips", "cores"), [
    ([0, 1, 2, 3], "0-31"),
    ([1, 2], "8-23"),
    ([0, 2, 3], "0-7,16-31"),
])
def test_neuron_core_ranges(chips: list[int], cores: str) -> None:
    assert core_range([chip_id("us", 0, c) for c in chips], 8) == cores


@pytest.mark.parametrize(("rows", "ranges"), [
    # a whole Gen2 UltraServer: 36 servers of 4
    ({"gen2-0003": "4" * 36}, "gen2-0003/s00-s35/c00-c03"),
    #   us-a: 4 4 . 2 2   us-b: 4
    ({"us-a": "44.22", "us-b": "4"}, "us-a/s00-s01/c00-c03,us-a/s03-s04/c00-c01,us-b/s00/c00-c03"),
    #   us-a: 1            (one chip is one range)
    ({"us-a": "1"}, "us-a/s00/c00"),
])
def test_chip_ids_as_ranges(rows: dict[str, str], ranges: str) -> None:
    chips = drawn(rows)
    assert chip_ranges(chips) == ranges
    assert parse_chip_ranges(ranges) == chips


@given(st.lists(st.tuples(st.sampled_from(["us-a", "us-b"]), st.integers(0, 40),
                          st.integers(0, 3)), unique=True))
def test_chip_ranges_give_back_every_id_in_order(cells: list[tuple[str, int, int]]) -> None:
    chips = [chip_id(*c) for c in cells]  # any order, non-adjacent chips included
    assert parse_chip_ranges(chip_ranges(chips)) == chips


def test_a_bad_chip_range_is_named() -> None:
    with pytest.raises(ValueError, match="'us-a/s03-s01/c00' runs backwards"):
        parse_chip_ranges("us-a/s03-s01/c00")
    with pytest.raises(ValueError, match="is not of the form"):
        parse_chip_ranges("us-a/s03")


@pytest.mark.parametrize(("text", "ok"), [("llama", "llama"), ("7b.v2", None), ("a" * 80, None)])
def test_dns_labels(text: str, ok: str | None) -> None:
    label = dns_label(text)
    assert len(label) <= 63 and label[0].isalpha() and all(c.isalnum() or c == "-" for c in label)
    if ok is not None:
        assert label == ok
    assert dns_label("a" * 80) != dns_label("a" * 81)


# --- outcomes -------------------------------------------------------------------------------

S0, S1 = ServerId("us/s00"), ServerId("us/s01")


def pods(*states: PodState, groups: int = 1) -> dict[tuple[int, int], tuple[ServerId, PodState]]:
    per = len(states) // groups
    return {(i // per, i % per): (ServerId(f"us/s{i:02d}"), s) for i, s in enumerate(states)}


RUN = PodState("Running", exists=True)
DONE = PodState("Succeeded", exists=True)
FAIL = PodState("Failed", exists=True, message="OOMKilled")
GONE = PodState("Running", exists=True, vanished=True)
WAIT = PodState("Pending", exists=True)
NONE = PodState()


@pytest.mark.parametrize(("kind", "slots", "verdict"), [
    ("TrainingJob", pods(RUN, RUN), "running"),
    ("TrainingJob", pods(RUN, WAIT), "launching"),
    ("TrainingJob", pods(RUN, NONE), "launching"),
    ("TrainingJob", pods(DONE, RUN), "succeeded"),       # rank 0 decides a training job
    ("TrainingJob", pods(RUN, DONE), "running"),
    ("TrainingJob", pods(DONE, FAIL), "succeeded"),
    ("TrainingJob", pods(RUN, FAIL), "failed"),
    ("TrainingJob", pods(RUN, GONE), "failed"),          # force-deleted
    ("InferenceJob", pods(DONE, RUN, DONE, DONE, groups=2), "running"),
    ("InferenceJob", pods(DONE, DONE, DONE, DONE, groups=2), "succeeded"),
    ("InferenceJob", pods(RUN, RUN, RUN, FAIL, groups=2), "failed"),
])
def test_outcome_rules(kind: str, slots: Any, verdict: str) -> None:
    assert outcome(kind, slots).kind == verdict


def test_a_failure_names_the_pod_and_its_server() -> None:
    result = outcome("TrainingJob", pods(RUN, FAIL))
    assert result.servers == (S1,)
    assert result.message == "pod of rank 1 on us/s01 is Failed: OOMKilled"
    gone = outcome("InferenceJob", pods(RUN, RUN, GONE, RUN, groups=2))
    assert gone.groups == (1,) and "replica 1 rank 0 on us/s02 was deleted" in gone.message


# --- the template rules' Python twin --------------------------------------------------------

@pytest.mark.parametrize(("spec", "error"), [
    ({"containers": [{"name": "a"}], "nodeName": "n"}, "spec.template.spec.nodeName"),
    ({"containers": [{"name": "a"}], "nodeSelector": {"a": "b"}}, "nodeSelector"),
    ({"containers": [{"name": "a", "resources": {"requests": {NEURON_RESOURCE: 1}}}]},
     "containers[].resources.requests must not ask"),
    ({"containers": []}, "needs at least one container"),
])
def test_template_rules(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        check_template({"spec": spec})
    check_template({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": 1}}}]}})
