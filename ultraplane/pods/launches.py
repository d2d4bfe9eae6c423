"""From an admitted job to its pods: one pod per allocated server, bound to that server's Node.

Why pure: what a launcher must get right (which chips each pod gets, which Node it is bound to,
its rank, the distributed-training environment, the headless Service that gives rank 0 a stable
name) is a function of the job's template and allocation and of the server -> Node map, so it
lives here as data in, manifests out, and is table-tested without an API server. The operator
(`operator/pods.py`) creates what this module returns and feeds pod phases to `outcomes.py`.

A *group* is the unit that runs one distributed program: a TrainingJob is one group (its whole
allocation); an InferenceJob has one group per replica. Inside a group the pods are ranked by
server id order (`<ultraserver>/sNN`), so rank 0 is the lowest server of the group and the
ranks of a group are contiguous from 0.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ultraplane.ids import ChipId, JobKey, ServerId, chip_ranges, parse_chip_id, server_id

NEURON_RESOURCE = "aws.amazon.com/neuron"
NEURON_TAINT = "aws.amazon.com/neuron"
COORDINATOR_PORT = 62182  # the Neuron runtime's default root-communicator port
LABEL_JOB_UID = "ultraplane.dev/job-uid"
LABEL_JOB_NAME = "ultraplane.dev/job-name"
LABEL_JOB_KIND = "ultraplane.dev/job-kind"
LABEL_ATTEMPT = "ultraplane.dev/attempt"
LABEL_GROUP = "ultraplane.dev/group"
LABEL_RANK = "ultraplane.dev/rank"
ANNOTATION_JOB_KEY = "ultraplane.dev/job-key"
ANNOTATION_SERVER = "ultraplane.dev/server"
ANNOTATION_CHIPS = "ultraplane.dev/chips"
API_VERSION = "ultraplane.dev/v1alpha1"

METRICS_PORT_NAME = "metrics"  # the containerPort a model server exports its metrics on


def metrics_port(pod: Mapping[str, Any]) -> int | None:
    """A pod's containerPort named `metrics` (vLLM's Prometheus endpoint), or None."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for port in c.get("ports") or []:
            if port.get("name") == METRICS_PORT_NAME and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None


_LABEL_BAD = re.compile(r"[^a-z0-9-]+")


class NoNodeError(ValueError):
    """An allocated server has no Node; the message names the server and the labels read."""


@dataclass(frozen=True)
class JobRef:
    """The job a launch is for (what ownerReferences, labels and names need)."""

    key: JobKey
    kind: str  # TrainingJob | InferenceJob
    namespace: str
    name: str
    uid: str
    attempt: int


@dataclass(frozen=True)
class PodPlan:
    """One pod of a launch: where it runs, which chips, and its manifest."""

    name: str
    group: int
    rank: int
    server: ServerId
    node: str
    chips: tuple[ChipId, ...]
    body: dict[str, Any]


@dataclass(frozen=True)
class Launch:
    """Every pod of one attempt of a job, and the headless Service naming them."""

    job: JobRef
    pods: tuple[PodPlan, ...]
    service: dict[str, Any]

    def by_slot(self) -> dict[tuple[int, int], PodPlan]:
        return {(p.group, p.rank): p for p in self.pods}


def dns_label(text: str, limit: int = 63) -> str:
    """A DNS-1035 label (lowercase alphanumerics and '-', starting with a letter) from `text`;
    a hash suffix keeps distinct inputs distinct when the text had to be changed or cut."""
    clean = _LABEL_BAD.sub("-", text.lower()).strip("-")
    if clean and not clean[0].isalpha():
        clean = "j-" + clean
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-') or 'j'}-{digest}"


def servers_of(chips: Sequence[ChipId | str]) -> dict[ServerId, tuple[ChipId, ...]]:
    """Chips grouped by server, servers in id order, chips in id order."""
    by: dict[ServerId, list[ChipId]] = {}
    for chip in chips:
        us, server, _ = parse_chip_id(chip)
        by.setdefault(server_id(us, server), []).append(ChipId(chip))
    return {s: tuple(sorted(by[s])) for s in sorted(by)}


def core_range(chips: Sequence[ChipId], cores_per_chip: int) -> str:
    """The NeuronCores of `chips` in the node's numbering (chip cNN holds cores
    NN*k .. NN*k+k-1), as ranges: `0-15`, or `0-7,16-23` when the chips are not adjacent."""
    return index_core_range([parse_chip_id(c)[2] for c in chips], cores_per_chip)


def index_core_range(indexes: Iterable[int], cores_per_chip: int) -> str:
    """`core_range` of chips given by their index on the node (the device plugin's view)."""
    spans: list[list[int]] = []
    for i in sorted(indexes):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a * cores_per_chip}-{(b + 1) * cores_per_chip - 1}" for a, b in spans)


def service_name(job: JobRef) -> str:
    return dns_label(job.name)


def hostname(job: JobRef, group: int, rank: int) -> str:
    """Stable across attempts, so rank 0's DNS name never changes for a job."""
    suffix = f"-{rank}" if job.kind == "TrainingJob" else f"-r{group}-{rank}"
    return dns_label(job.name, 63 - len(suffix)) + suffix


def pod_name(job: JobRef, group: int, rank: int) -> str:
    """Unique per attempt: a new attempt's pods never wait for old names to be freed."""
    return f"{hostname(job, group, rank)}-a{job.attempt}"


def _env(pairs: Mapping[str, str | int]) -> list[dict[str, str]]:
    return [{"name": k, "value": str(v)} for k, v in pairs.items()]


def environment(job: JobRef, *, group: int, rank: int, world: int, server: ServerId,
                local: Sequence[ChipId], group_chips: Sequence[ChipId], coordinator: str,
                ultraservers: Sequence[str], cores_per_chip: int, port: int) -> dict[str, str | int]:
    """The variables every container of the pod gets (docs/operator.md, Pods, explains each)."""
    us, index, _ = parse_chip_id(local[0])
    cores = core_range(local, cores_per_chip)
    env: dict[str, str | int] = {
        "ULTRAPLANE_JOB": job.name,
        "ULTRAPLANE_JOB_KIND": job.kind,
        "ULTRAPLANE_JOB_NAMESPACE": job.namespace,
        "ULTRAPLANE_ATTEMPT": job.attempt,
        "ULTRAPLANE_WORLD_SIZE": world,
        "ULTRAPLANE_NODE_RANK": rank,
        "ULTRAPLANE_LOCAL_CHIPS": len(local),
        "ULTRAPLANE_TOTAL_CHIPS": len(group_chips),
        "ULTRAPLANE_COORDINATOR_ADDR": coordinator,
        "ULTRAPLANE_COORDINATOR_PORT": port,
        "ULTRAPLANE_LOCAL_CHIP_IDS": ",".join(local),
        # ranges (`ids.chip_ranges`): a 144-chip gang's ids were half of each of its pods
        "ULTRAPLANE_CHIP_IDS": chip_ranges(group_chips),
        "ULTRAPLANE_NEURON_CORES": cores,
        "ULTRAPLANE_ULTRASERVER": us,
        "ULTRAPLANE_ULTRASERVERS": ",".join(ultraservers),
        "ULTRAPLANE_SERVER": server,
        "ULTRAPLANE_SERVER_INDEX": index,
        # the names torchrun / torch-neuronx and the Neuron runtime read
        "MASTER_ADDR": coordinator,
        "MASTER_PORT": port,
        "NNODES": world,
        "NODE_RANK": rank,
        "NEURON_RT_ROOT_COMM_ID": f"{coordinator}:{port}",
    }
    if job.kind == "InferenceJob":
        env["ULTRAPLANE_REPLICA"] = group
    return env


def _with_env(container: dict[str, Any], env: Mapping[str, str | int]) -> None:
    """Ours replace the template's variables of the same name; the template's others stay."""
    kept = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = kept + _env(env)


def pod_body(job: JobRef, template: Mapping[str, Any], *, group: int, rank: int, node: str,
             server: ServerId, chips: Sequence[ChipId], env: Mapping[str, str | int],
             grace_seconds: int) -> dict[str, Any]:
    """The Pod manifest: the template, bound to `node`, with the chips and the environment."""
    tmpl = copy.deepcopy(dict(template))
    meta = tmpl.get("metadata") or {}
    spec: dict[str, Any] = tmpl.get("spec") or {}
    labels = {**(meta.get("labels") or {}),
              LABEL_JOB_UID: job.uid, LABEL_JOB_NAME: dns_label(job.name),
              LABEL_JOB_KIND: job.kind, LABEL_ATTEMPT: str(job.attempt),
              LABEL_GROUP: str(group), LABEL_RANK: str(rank)}
    annotations = {**(meta.get("annotations") or {}), ANNOTATION_JOB_KEY: job.key,
                   ANNOTATION_SERVER: server, ANNOTATION_CHIPS: chip_ranges(chips)}
    spec["nodeName"] = node
    spec["hostname"] = hostname(job, group, rank)
    spec["subdomain"] = service_name(job)
    spec.setdefault("restartPolicy", "Never")
    spec.setdefault("terminationGracePeriodSeconds", grace_seconds)
    tolerations = list(spec.get("tolerations") or [])
    if not any(t.get("key") == NEURON_TAINT for t in tolerations):
        tolerations.append({"key": NEURON_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    spec["tolerations"] = tolerations
    containers = spec.get("containers") or []
    for container in [*containers, *(spec.get("initContainers") or [])]:
        _with_env(container, env)
    # The devices go to the first container: extended resources add up across containers.
    main = containers[0]
    resources = main.setdefault("resources", {})
    count = str(len(chips))
    resources["limits"] = {**(resources.get("limits") or {}), NEURON_RESOURCE: count}
    resources["requests"] = {**(resources.get("requests") or {}), NEURON_RESOURCE: count}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job, group, rank), "namespace": job.namespace,
            "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": job.kind, "name": job.name,
                                 "uid": job.uid, "controller": True}],
        },
        "spec": spec,
    }


def service_body(job: JobRef, port: int = COORDINATOR_PORT) -> dict[str, Any]:
    """Headless, publishing not-ready pods: rank 0 resolves before any readiness probe passes."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job), "namespace": job.namespace,
            "labels": {LABEL_JOB_UID: job.uid, LABEL_JOB_NAME: dns_label(job.name)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": job.kind, "name": job.name,
                                 "uid": job.uid, "controller": True}],
        },
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {LABEL_JOB_UID: job.uid},
                 "ports": [{"name": "coordinator", "port": port, "protocol": "TCP"}]},
    }


def plan(job: JobRef, template: Mapping[str, Any], groups: Sequence[Sequence[ChipId | str]],
         nodes: Mapping[ServerId, str], *, cores_per_chip: Mapping[str, int],
         grace_seconds: int = 120, port: int = COORDINATOR_PORT,
         cluster_domain: str = "svc") -> Launch:
    """The pods of one attempt: `groups` are the chips of each group (one for a TrainingJob,
    one per replica for an InferenceJob); `nodes` maps server ids (`us/sNN`) to Node names.

    Raises `NoNodeError` naming every allocated server without a Node.
    """
    missing = sorted({s for chips in groups for s in servers_of(chips) if s not in nodes})
    if missing:
        raise NoNodeError(f"no Node for allocated server(s) {', '.join(missing)}")
    pods: list[PodPlan] = []
    for group, chips in enumerate(groups):
        by_server = servers_of(chips)
        group_chips = tuple(c for cs in by_server.values() for c in cs)
        ultraservers = tuple(dict.fromkeys(parse_chip_id(c)[0] for c in group_chips))
        coordinator = f"{hostname(job, group, 0)}.{service_name(job)}.{job.namespace}." \
                      f"{cluster_domain}"
        for rank, (server, local) in enumerate(by_server.items()):
            us = parse_chip_id(local[0])[0]
            env = environment(job, group=group, rank=rank, world=len(by_server), server=server,
                              local=local, group_chips=group_chips, coordinator=coordinator,
                              ultraservers=ultraservers, cores_per_chip=cores_per_chip.get(us, 8),
                              port=port)
            body = pod_body(job, template, group=group, rank=rank, node=nodes[server],
                            server=server, chips=local, env=env, grace_seconds=grace_seconds)
            pods.append(PodPlan(body["metadata"]["name"], group, rank, server, nodes[server],
                                local, body))
    return Launch(job, tuple(pods), service_body(job, port))
