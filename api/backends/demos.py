"""A seeded stream of demo jobs, so a newcomer's `ultraplane serve` shows a live fleet.

It keeps roughly three quarters of the fleet asked for: gang sizes from one
server to two UltraServers, an occasional high-priority job (to show
preemption) and a few inference services. Finished demo jobs are pruned from
the job list (their accounting stays), so a long-running demo stays small.
"""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING, Any

from ultraplane.api.backends import JobSpec
from ultraplane.api.backends.embeddedjobs import JobState
from ultraplane.api.schemas import JobKind

from ultraplane.resources import InferenceJobSpec, TrainingJobSpec

if TYPE_CHECKING:
    from ultraplane.api.backends.embedded import EmbeddedBackend

NAMESPACE = "demo"
TARGET_DEMAND = 0.75  # fraction of the fleet's chips the stream keeps asked for
MAX_QUEUED = 4
KEEP_FINISHED = 50
# (chips, required level, weight): sizes of real gang jobs, from a server to two UltraServers.
SIZES = ((4, "server", 4), (16, "rack", 4), (36, "rack", 3), (72, "ultraserver", 3),
         (144, "ultraserver", 2), (288, "network-1", 1))
MODELS = (("llama-3-8b", 8.0), ("llama-3-70b", 70.0), ("mixtral-8x22b", 141.0),
          ("deepseek-v3", 671.0))


class DemoStream:
    def __init__(self, backend: EmbeddedBackend, *, seed: int) -> None:
        self.b = backend
        self.rng = random.Random(seed)

    def _training(self) -> dict[str, Any]:
        sizes = [s for s in SIZES if s[0] <= self.b.topology.chip_count]
        chips, level, _ = self.rng.choices(sizes, weights=[s[2] for s in sizes])[0]
        name, params = self.rng.choice(MODELS)
        return {
            "chips": chips,
            "topology": {"requiredLevel": level},
            "priority": 100 if self.rng.random() < 0.1 else 0,
            "model": {"name": name, "parametersBillions": params},
            "work": {"durationSeconds": self.rng.randrange(1_800, 4 * 3_600, 300)},
        }

    def _inference(self) -> dict[str, Any]:
        name, params = self.rng.choice(MODELS[:3])
        return {
            "replicas": self.rng.choice((1, 2)),
            "chipsPerReplica": self.rng.choice((4, 16)),
            "topology": {"requiredLevel": "rack"},
            "priority": 50,
            "model": {"name": name, "parametersBillions": params},
            "load": {"requestsPerSecond": float(self.rng.choice((20, 50, 100)))},
            "durationSeconds": self.rng.randrange(3_600, 3 * 3_600, 600),
        }

    def step(self, now: float) -> None:
        jobs = self.b.jobs
        demand = sum(j.chips for j in jobs.values() if not j.finished)
        queued = sum(1 for j in jobs.values() if j.phase in ("Pending", "Preempted"))
        if demand < TARGET_DEMAND * self.b.topology.chip_count and queued < MAX_QUEUED:
            self.b.next_seq += 1
            seq = self.b.next_seq
            kind: JobKind
            spec: JobSpec
            if self.rng.random() < 0.2:
                kind, spec = "InferenceJob", InferenceJobSpec.model_validate(self._inference())
                name = f"serve-{seq:05d}"
            else:
                kind, spec = "TrainingJob", TrainingJobSpec.model_validate(self._training())
                name = f"train-{seq:05d}"
            job = JobState(uid=str(uuid.uuid4()), kind=kind, namespace=NAMESPACE, name=name,
                           spec=spec, seq=seq, created_s=now, labels={"ultraplane.dev/demo": "true"})
            self.b.register(job)
            self.b.queue_created(seq, job)  # after any create in flight with an earlier number
        # Only jobs already saved (not dirty): their final accounting row is written.
        finished = sorted(
            (j for j in jobs.values() if j.namespace == NAMESPACE and j.finished and not j.dirty),
            key=lambda j: j.seq,
        )
        for job in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            self.b.forget(job)
