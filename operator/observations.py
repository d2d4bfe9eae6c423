"""What the operator does with each watch event: update the cache, never run a cycle.

Why the rules below: the scheduler's memory is authoritative for jobs it already knows (our own
status writes echo back as events and must not resubmit anything), while the API server is
authoritative for what other writers decide (the simulator's Succeeded/Failed, a deletion) and
for jobs we have never seen (after a restart, `status.allocation` is how chips are re-adopted).
Health changes on an UltraServer apply at once: failed chips trigger the job's failure policy,
cordons stop new placements, and the drain policy decides whether running jobs stay.

What follows from an event is the core's to decide: each one reaches it as a trigger of the
driver (`Admissions`: a job ended, was deleted, has a spec it cannot read, lost a chip, was
drained), and the decision it returns goes to the outbox as it is. Nothing here changes the
scheduler's state any other way, or decides a consequence itself.

The allocator holds an InferenceJob's replicas under replica keys (`ij/ns/name#i`); everything
here that starts from a chip or an UltraServer maps those back to the job (`Admissions.owner`),
because a job is evicted, restarted or failed as a whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ultraplane.operator.inventory import Inventory, InventoryChange, ultraserver_from_body
from ultraplane.operator.jobviews import (
    FLEET_LABEL,
    HOLDING_PHASES,
    TERMINAL_PHASES,
    view_job,
)
from ultraplane.operator.outboxes import Outbox
from ultraplane.operator.statuses import Resized

from ultraplane.documents.overrides import overridden_message
from ultraplane.ids import ChipId, JobKey, kind_of_job_key
from ultraplane.placement.allocator import AllocationConflict, Allocator
from ultraplane.scheduling.admissions import Admissions, Failed, Requeued
from ultraplane.scheduling.decisions import ScaledDown, ScalingUp
from ultraplane.workloads import QueuedJob

log = logging.getLogger("ultraplane.operator")


def newer(a: str, b: str) -> bool:
    """True when resourceVersion `a` is strictly newer than `b` (etcd revisions are integers)."""
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return False


class ObservationCache:
    """What the watch events said: job bodies, the inventory, and the core driver they feed.

    Composed by `controllers.Controller`; it never calls the API. What an event decides to
    write goes to the `outbox`; `wake` tells the admission loop there is something new."""

    def __init__(self, admissions: Admissions, inventory: Inventory, outbox: Outbox, *,
                 wake: asyncio.Event, emit: Callable[[Mapping[str, Any], str, str, str], None],
                 fleet: str | None = None) -> None:
        self.admissions = admissions
        self.allocator: Allocator = admissions.allocator
        self.inventory = inventory
        self.outbox = outbox
        self.wake = wake
        self.emit = emit
        self.fleet = fleet
        self.bodies: dict[JobKey, dict[str, Any]] = {}
        self.submitted: dict[JobKey, QueuedJob] = {}  # what each job was last queued as
        self.buffered: dict[JobKey, tuple[dict[str, Any], bool]] = {}  # before `ready`
        self.removing: dict[JobKey, dict[str, Any]] = {}
        self.unfinalize: set[JobKey] = set()  # deleting jobs still carrying our old finalizer
        self.ghosts: set[str] = set()  # deleted UltraServers kept until their jobs finish
        # spec.replicas the operator's planner is writing, with its reason (`autoscalers`)
        self.planned: dict[JobKey, tuple[int, str]] = {}
        self.ready = False

    # -- jobs --------------------------------------------------------------------------
    def remember(self, key: JobKey, body: Mapping[str, Any]) -> None:
        """Keep the newest body we have seen (watch events may arrive after our own writes)."""
        old = self.bodies.get(key)
        rv = str((body.get("metadata") or {}).get("resourceVersion", ""))
        if old is not None and newer(str(old["metadata"].get("resourceVersion", "")), rv):
            return
        self.bodies[key] = dict(body)

    def forget(self, key: JobKey) -> None:
        """The job was deleted (or is being deleted, or another took its name)."""
        self.admissions.deleted(key)
        self.submitted.pop(key, None)
        self.bodies.pop(key, None)
        self.outbox.forget(key)

    def observe_job(self, body: Mapping[str, Any], *, deleted: bool = False,
                    kind: str | None = None) -> None:
        """A TrainingJob or InferenceJob body (`kind` when the body may not carry it)."""
        if kind is not None and body.get("kind") != kind:
            body = {**body, "kind": kind}
        view = view_job(body)
        key = view.key
        if not self.ready:
            self.buffered[key] = (dict(body), deleted)
            return
        old = self.bodies.get(key)
        if old is not None and old["metadata"].get("uid") != view.uid:
            self.forget(key)
            old = None
        if deleted:
            self.wake.set()
            self.forget(key)
            self.removing.pop(key, None)
            return
        if old is not None:
            known = str(old["metadata"].get("resourceVersion", ""))
            if (known and known == view.resource_version) or newer(known,
                                                                   view.resource_version):
                # The echo of our own status write (`remember` kept its answer) or a stale
                # event: nothing new, so no cycle. Every admission, Running, Succeeded and
                # position write comes back this way, and each cycle recomputes the reservation.
                return
        self.wake.set()
        self.bodies[key] = dict(body)
        if view.deleting:
            self.forget(key)
            if view.has_finalizer:  # left by an earlier version: let the deletion finish
                self.removing[key] = dict(body)
                self.unfinalize.add(key)
            return
        was = str(((old or {}).get("status") or {}).get("phase") or "")
        if view.phase == "Running" and old is not None and was != "Running":
            # the simulator (or a workload) started it: every transition posts an Event
            self.emit(body, "Normal", "Running", "The job is running on its chips.")
        if view.phase in TERMINAL_PHASES:
            finished = self.admissions.finished(key, view.phase)
            self.outbox.discard(key)
            if (body.get("status") or {}).get("allocation"):
                # Its chips are free: a finished job no longer names them (the write posts the
                # Succeeded or Failed Event).
                self.outbox.put(key, finished)
            return
        if self.admissions.is_running(key):
            self.follow_replicas(key)
            return
        if view.queued is None:
            self.outbox.put(key, self.admissions.invalid(key, view.error))
            return
        if self.admissions.is_waiting(key):
            # A waiting job's spec may have been edited (priority, size): the newest counts.
            # Most events of a waiting job are its status writes (ours, echoed): resubmitting
            # those unchanged made every cycle after a position write a full one.
            if self.submitted.get(key) != view.queued:
                self.submitted[key] = view.queued
                self.admissions.submit(view.queued)
            return
        if isinstance(self.outbox.get(key), Failed):
            # Failed by a decision whose write is on its way: a heartbeat written before it
            # (the runtime's Running, with the old allocation) must not re-adopt the chips.
            return
        if view.phase in HOLDING_PHASES and view.chips:
            queued = view.queued
            chips: tuple[tuple[ChipId, ...], ...] = (view.chips,)
            if queued.replicas is not None:
                chips = view.replica_chips
                if chips and all(len(c) == queued.request.chips for c in chips):
                    # as many as were placed (rescaled since?); the spec's count comes next
                    queued = dataclasses.replace(queued, replicas=len(chips))
            outcome = self.admissions.readopt(queued, chips)
            if isinstance(outcome, Requeued):
                log.warning("cannot re-adopt %s's chips (%s); requeueing it", key,
                            outcome.message)
                self.outbox.put(key, outcome)
            else:
                self.follow_replicas(key)
            return
        status = body.get("status") or {}
        if view.phase == "Pending" and status.get("reason"):
            # What an earlier run wrote still stands; rewrite it only when it changes (a restart
            # would otherwise rewrite every waiting job at once).
            self.outbox.found_written(key, status)
        self.submitted[key] = view.queued
        self.admissions.submit(view.queued)

    def follow_replicas(self, key: JobKey) -> None:
        """A running InferenceJob's spec.replicas (the scale subresource: `kubectl scale`, an
        HPA) differs from the count the core holds or is growing to: the core rescales it
        (`Admissions.rescale`) and its decision is queued as it is. Not before its admission
        is on the record: a rescale written ahead of it would be overwritten by the admission's
        older allocation (the admission write calls this again when it lands)."""
        body = self.bodies.get(key) or {}
        spec, status = body.get("spec") or {}, body.get("status") or {}
        replicas = spec.get("replicas")
        if not isinstance(replicas, int) or replicas < 1 or not (status.get("allocation") or {}):
            return
        held = self.admissions.desired(key)
        old = self.outbox.get(key)
        if held is None or held == replicas or (old is not None and not isinstance(old, Resized)):
            return  # (another decision's write first: it calls this again when it lands)
        overridden, reason = "", "Set by spec.replicas."
        planned = self.planned.pop(key, None)
        if planned is not None and planned[0] == replicas:
            reason = planned[1]  # the planner's own edit (`autoscalers`): not an override
        elif spec.get("autoscaling"):
            overridden = overridden_message(replicas)
        decision = self.admissions.rescale(key, replicas, reason)
        if not isinstance(decision, ScaledDown | ScalingUp):
            return
        old = self.outbox.get(key)
        self.outbox.put(key, old.then(decision, overridden) if isinstance(old, Resized)
                        else Resized((decision,), overridden))
        self.wake.set()

    def owner(self, part: JobKey) -> JobKey:
        """The job an allocator key belongs to (a replica key names its InferenceJob)."""
        return self.admissions.owner(part)

    # -- UltraServers ------------------------------------------------------------------
    def observe_ultraserver(self, body: Mapping[str, Any], *, deleted: bool = False,
                            settle: bool = True) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        self.wake.set()
        if self.fleet is not None and (meta.get("labels") or {}).get(FLEET_LABEL) != self.fleet:
            deleted = True  # not ours (any more)
        if deleted:
            self._remove_ultraserver(name)
            return
        try:
            entry = ultraserver_from_body(body)
            change = self.inventory.upsert(entry)
            self.allocator.upsert_ultraserver(entry.ultraserver)
        except (ValueError, AllocationConflict) as exc:
            log.warning("ignoring UltraServer %s: %s", name, exc)
            return
        self.ghosts.discard(name)
        if settle and self.ready:
            self.enforce(change)

    def _remove_ultraserver(self, name: str) -> None:
        entry = self.inventory.remove(name)
        if name not in self.allocator.topology:
            return
        holders = dict.fromkeys(self.owner(p) for p in self.allocator.jobs_in([name]))
        if holders and (entry is None or entry.drain_policy == "Wait"):
            self.allocator.set_schedulable(name, False)
            self.ghosts.add(name)  # removed once its last job finishes
            return
        for job in holders:
            self.outbox.put(job, self.admissions.drained(job, name, deleted=True))
        self.allocator.remove_ultraserver(name)

    def enforce_health(self, name: str, *, full: bool = False) -> None:
        """After a restart every failed chip or cordon counts as new for the jobs on it."""
        entry = self.inventory.get(name)
        if entry is None:
            return
        us = entry.ultraserver
        self.enforce(InventoryChange(
            name=name,
            newly_failed=frozenset(ChipId(f"{name}/{ref}") for ref in us.failed_chips),
            newly_cordoned=us.cordoned_servers,
            became_unschedulable=not us.schedulable,
        ))

    def enforce(self, change: InventoryChange) -> None:
        lost: dict[JobKey, dict[JobKey, list[ChipId]]] = {}  # job -> part -> chips
        for chip in sorted(change.newly_failed):
            try:
                holder = self.allocator.job_of(chip)
            except (KeyError, ValueError):
                continue
            if holder is not None:
                lost.setdefault(self.owner(holder), {}).setdefault(holder, []).append(chip)
        for job, parts in lost.items():
            self._chip_failed(job, parts)
        entry = self.inventory.get(change.name)
        if entry is None or entry.drain_policy != "Requeue":
            return
        drained: set[JobKey] = set()
        if change.became_unschedulable:
            drained.update(self.owner(p) for p in self.allocator.jobs_in([change.name]))
        prefixes = tuple(f"{change.name}/s{s:02d}" for s in change.newly_cordoned)
        if prefixes:
            for part, placement in self.allocator.allocations().items():
                if any(srv in prefixes for srv in placement.servers):
                    drained.add(self.owner(part))
        for job in sorted(drained - set(lost)):
            self.outbox.put(job, self.admissions.drained(job, change.name, deleted=False))

    def _chip_failed(self, job: JobKey, parts: Mapping[JobKey, list[ChipId]]) -> None:
        """The core applies the job's failure policy (`Admissions.chip_failed`); this only
        queues the write of what it decided. With no cached body, the kind's default policy
        (what an empty spec reads as)."""
        policy = view_job(self.bodies.get(job) or {}, kind_of_job_key(job)).failure_policy
        self.outbox.put(job, self.admissions.chip_failed(job, parts, policy))

    def collect_ghosts(self) -> None:
        """Remove the deleted UltraServers whose last job has finished."""
        for name in list(self.ghosts):
            if not self.allocator.jobs_in([name]):
                self.allocator.remove_ultraserver(name)
                self.ghosts.discard(name)
