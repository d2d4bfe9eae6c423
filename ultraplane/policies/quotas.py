"""Tenant queues: chip quotas per hardware profile, borrowing in a cohort, fair share, reclaim.

Why in the core, beside the scheduling cycle: a quota is an admission rule like any other, and
the operator, the embedded API and the replay must refuse, order and reclaim exactly alike, so
the accounting and every decision live here and `Scheduler` consults one `QuotaBook`. The
adapters only say which queue a job names (`QueuedJob.queue`) and persist what was decided.

The model is Kueue's ClusterQueue with cohorts (docs/queues.md maps it field by field):
- A queue has `nominal` chips per hardware profile. `lending_limit` caps how much of its unused
  nominal quota the rest of its cohort may borrow; the part it does not lend is guaranteed to
  it alone. `borrowing_limit` caps how far over nominal it may go.
- The cohort's pool is what its queues lend. A queue may take chips while its usage stays
  within nominal plus what the pool has idle (and within its borrowing limit).
- Admission order inside a cycle (weighted max-min fair share): every job that keeps its
  queue within nominal first, the queue furthest below its nominal quota first (each queue's
  own order kept); then the jobs that borrow, by how much their queue would have borrowed
  once admitted, divided by its weight, lowest first. So idle cohort capacity is handed out
  by water-filling: each queue that wants more gets its weighted share before any gets more.
- Placement keeps borrowed chips apart (`allocate_apart`): a borrower goes first where only
  borrowers run (or an idle UltraServer), a guaranteed job where no borrower runs. A quota
  counts chips, but a gang needs them in one domain: borrowers scattered beside guaranteed
  jobs would leave no UltraServer that reclaim can free. For the same reason a job within
  nominal that fits nowhere, even by reclaim, may reserve an UltraServer to drain (the
  Scheduler's EASY reservation, which otherwise only gangs of whole UltraServers get; one
  per queue below its nominal quota, not one per cycle).
- Reclaim: a job whose queue stays within nominal once it is admitted may preempt the jobs of
  queues in its cohort that are borrowing (policy `Any`, or only lower-priority ones with
  `LowerPriority`). The victims are planned by `ultraplane.placement.preemption` inside one domain the
  job can use, so reclaim frees a whole domain, never scattered chips; the fewest victims win,
  then the fewest chips, then the lowest priority, then the most recently admitted.
- Within a queue, a job may preempt its own queue's lower-priority jobs for chips
  (`within_queue` `LowerPriority`); it never preempts another queue's job that is within its
  nominal quota, whatever the priorities.
- Rights (Kueue's `namespaceSelector` and LocalQueue): a queue lists the namespaces that may
  use it (`namespaces`; none listed = every namespace), and may be the default queue of some
  (`default_for`): a job naming no queue uses its namespace's default. A job whose namespace
  may not use its queue, or whose priority is above the queue's `max_priority`, waits
  `Inadmissible` with the reason, so priority is no way around a quota.
- A job naming no queue, in a namespace with no default queue, is not managed by quotas: it
  only competes, by priority, with other jobs that name none (how the fleet behaved before
  queues existed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from ultraplane.ids import JobKey, namespace_of_job_key
from ultraplane.placement.allocator import Allocator, NoFit, Placement

if TYPE_CHECKING:
    from ultraplane.workloads import QueuedJob

__all__ = ["INADMISSIBLE", "NO_QUOTA", "QueueRefusal", "QueueSpec", "QuotaBook", "default_queues",
           "equal_shares", "queue_refusal"]

NO_QUOTA: Final = "NoQuota"  # the NoFit kind of a job its queue's quota does not admit now
INADMISSIBLE: Final = "Inadmissible"  # its queue refuses it (namespace, priority, no queue)

Reclaim = Literal["Never", "LowerPriority", "Any"]
WithinQueue = Literal["Never", "LowerPriority"]


@dataclass(frozen=True)
class QueueRefusal:
    """Why a job may not use a queue, whatever its usage: `rule` names which (an adapter maps
    it, e.g. to an HTTP status), `message` says it to the user."""

    rule: Literal["NoSuchQueue", "NamespaceNotAllowed", "PriorityAboveMaximum"]
    message: str


def queue_refusal(queues: Mapping[str, QueueSpec], queue: str, namespace: str,
                  priority: int) -> QueueRefusal | None:
    """Why a job of `namespace` at `priority` may not use `queue`, or None."""
    spec = queues.get(queue)
    if spec is None:
        return QueueRefusal("NoSuchQueue", f"queue {queue} does not exist")
    return spec.admits(namespace, priority)


def default_queues(specs: Iterable[QueueSpec]) -> dict[str, str]:
    """Namespace -> the queue its jobs naming none use: the first by name of those whose
    `default_for` lists it."""
    defaults: dict[str, str] = {}
    for spec in sorted(specs, key=lambda q: q.name):
        for namespace in spec.default_for:
            defaults.setdefault(namespace, spec.name)
    return defaults


@dataclass(frozen=True)
class QueueSpec:
    """One cluster-scoped queue (Kueue: a ClusterQueue with one flavor per hardware profile)."""

    name: str
    nominal: Mapping[str, int]  # hardware profile -> chips guaranteed
    cohort: str | None = None
    borrowing_limit: int | None = None  # chips over nominal it may borrow, per profile
    lending_limit: int | None = None  # chips of its unused nominal it lends, per profile
    weight: float = 1.0
    reclaim_within_cohort: Reclaim = "Any"
    within_queue: WithinQueue = "LowerPriority"
    max_priority: int | None = None
    namespaces: tuple[str, ...] | None = None  # who may use it; None = every namespace
    default_for: tuple[str, ...] = ()  # namespaces whose jobs naming no queue use this one

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a queue needs a name")
        if self.namespaces is not None and set(self.default_for) - set(self.namespaces):
            raise ValueError(f"queue {self.name}: it can only be the default queue of "
                             "namespaces that may use it")
        if any(v < 0 for v in self.nominal.values()):
            raise ValueError(f"queue {self.name}: nominal chips must be >= 0")
        for what, v in (("borrowing", self.borrowing_limit), ("lending", self.lending_limit)):
            if v is not None and v < 0:
                raise ValueError(f"queue {self.name}: the {what} limit must be >= 0")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ValueError(f"queue {self.name}: the fair-share weight must be > 0")

    def admits(self, namespace: str, priority: int) -> QueueRefusal | None:
        """Why a job of `namespace` at `priority` may not use this queue, or None."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return QueueRefusal(
                "NamespaceNotAllowed",
                f"namespace {namespace} may not use queue {self.name} (it admits jobs from "
                f"{', '.join(sorted(self.namespaces)) or 'no namespace'})")
        if self.max_priority is not None and priority > self.max_priority:
            return QueueRefusal(
                "PriorityAboveMaximum",
                f"priority {priority} is above queue {self.name}'s maximum of "
                f"{self.max_priority}")
        return None

    def lends(self, profile: str) -> int:
        nominal = self.nominal.get(profile, 0)
        return nominal if self.lending_limit is None else min(nominal, self.lending_limit)


def equal_shares(names: Iterable[str], capacity: Mapping[str, int],
                 cohort: str = "fleet") -> list[QueueSpec]:
    """One queue per name, each with an equal share of every profile's chips, in one cohort
    (the remainder goes to the first queues, so the shares add up to the fleet)."""
    names = sorted(set(names))
    specs = []
    for i, name in enumerate(names):
        nominal = {p: c // len(names) + (1 if i < c % len(names) else 0)
                   for p, c in capacity.items()}
        specs.append(QueueSpec(name, nominal, cohort=cohort))
    return specs


@dataclass
class _Held:
    queue: str | None
    chips: dict[str, int]  # profile -> chips
    job: QueuedJob
    on: dict[str, int]  # UltraServer -> chips


@dataclass
class QuotaBook:
    """The queues and what each job holds against them; `Scheduler` keeps it current."""

    specs: Sequence[QueueSpec]
    queues: dict[str, QueueSpec] = field(init=False)
    usage: dict[tuple[str, str], int] = field(init=False, default_factory=dict)
    _held: dict[JobKey, _Held] = field(init=False, default_factory=dict)
    _members: dict[str, list[QueueSpec]] = field(init=False, default_factory=dict)
    _profiles: tuple[str, ...] = field(init=False, default=())
    # Reclaims that found no domain, by what they depend on: the job's queue, priority,
    # request and usage, the free room (chips released since, `_freed`, and the fleet's free
    # chips at the cycle's start, which repairs move) and the borrowers (`_grow`).
    _no_reclaim: set[tuple[object, ...]] = field(init=False, default_factory=set)
    _grow: int = field(init=False, default=0)  # moves when a hold makes or keeps a borrower
    _freed: int = field(init=False, default=0)  # moves on every release
    _free_at_start: int = field(init=False, default=0)
    _names: tuple[str, ...] = field(init=False, default=())
    _fleet_epoch: int = field(init=False, default=-1)
    _total: dict[str, int] = field(init=False, default_factory=dict)  # queue -> chips, all profiles
    _rooms: dict[tuple[str, str], int] = field(init=False, default_factory=dict)
    _refusals: dict[tuple[str, int], NoFit | None] = field(init=False, default_factory=dict)
    _candidates: dict[tuple[str | None, int, bool], list[QueuedJob]] = field(
        init=False, default_factory=dict)
    _epoch: int = field(init=False, default=0)  # moves on every hold or release
    # Jobs that got chips in this cycle: never victims in it (its decisions would both admit
    # and preempt them).
    _fresh: set[JobKey] = field(init=False, default_factory=set)

    _defaults: dict[str, str] = field(init=False, default_factory=dict)  # namespace -> queue
    # UltraServer -> queue -> chips its jobs hold there (placement keeps borrowers apart)
    _on: dict[str, dict[str | None, int]] = field(init=False, default_factory=dict)
    _over: tuple[int, frozenset[str]] | None = field(init=False, default=None)  # borrowing queues

    def __post_init__(self) -> None:
        self.replace(self.specs)

    def replace(self, specs: Sequence[QueueSpec]) -> None:
        """Take a new set of queues (one was created, edited or deleted). What running jobs
        hold stays counted against the queue they were admitted to."""
        queues: dict[str, QueueSpec] = {}
        members: dict[str, list[QueueSpec]] = {}
        for spec in sorted(specs, key=lambda q: q.name):
            if spec.name in queues:
                raise ValueError(f"queue {spec.name!r} is listed twice")
            queues[spec.name] = spec
            members.setdefault(spec.cohort or f"/{spec.name}", []).append(spec)
        self.specs, self.queues, self._members, self._defaults = (
            tuple(specs), queues, members, default_queues(queues.values()))
        # what running jobs hold counts against the queue they use now (a new default queue
        # takes its namespace's running jobs)
        self.usage.clear()
        self._total.clear()
        for held in self._held.values():
            held.queue = self.queue_of(held.job)
            if held.queue is not None:
                for profile, n in held.chips.items():
                    key = (held.queue, profile)
                    self.usage[key] = self.usage.get(key, 0) + n
                self._total[held.queue] = self._total.get(held.queue, 0) + sum(held.chips.values())
        self._no_reclaim.clear()
        self._moved()

    @property
    def active(self) -> bool:
        """Whether any queue exists: without one, the cycle runs as if there were no book
        (it still counts what jobs hold, so a queue created later starts with true usage)."""
        return bool(self.queues)

    def queue_of(self, job: QueuedJob) -> str | None:
        """The queue `job` uses: the one it names, else its namespace's default, else none."""
        if job.queue is not None:
            return job.queue
        return self._defaults.get(namespace_of_job_key(job.key)) if self._defaults else None

    # -- accounting (called by Scheduler) ------------------------------------------------
    def begin_cycle(self, allocator: Allocator) -> None:
        if self._fleet_epoch != allocator.room_epoch:  # only the inventory changes these
            ultraservers = allocator.topology.ultraservers
            self._profiles = tuple(sorted({us.profile for us in ultraservers}))
            self._names = tuple(us.name for us in ultraservers)
        self._free_at_start = allocator.free_chips(self._names)
        self._fleet_epoch = allocator.room_epoch
        if len(self._no_reclaim) > 100_000:
            self._no_reclaim.clear()
        self._fresh.clear()

    def hold(self, job: QueuedJob, allocator: Allocator) -> None:
        held = allocator.allocations()
        chips: dict[str, int] = {}
        on: dict[str, int] = {}
        for part in job.parts():
            placement = held.get(part)
            if placement is None:
                continue
            for us, n in placement.chips_by_ultraserver:
                profile = allocator.profile_of(us)
                chips[profile] = chips.get(profile, 0) + n
                on[us] = on.get(us, 0) + n
        self.unhold(job.key)
        queue = self.queue_of(job)
        self._held[job.key] = _Held(queue, chips, job, on)
        for us, n in on.items():
            here = self._on.setdefault(us, {})
            here[queue] = here.get(queue, 0) + n
        self._fresh.add(job.key)
        if queue is not None:
            for profile, n in chips.items():
                self.usage[(queue, profile)] = self.usage.get((queue, profile), 0) + n
            self._total[queue] = self._total.get(queue, 0) + sum(chips.values())
        self._moved()
        if queue in self.queues and self.borrowed(queue):
            self._grow += 1

    def unhold(self, key: JobKey) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        if held.queue is not None:
            for profile, n in held.chips.items():
                self.usage[(held.queue, profile)] -= n
            self._total[held.queue] -= sum(held.chips.values())
        for us, n in held.on.items():
            here = self._on[us]
            here[held.queue] -= n
            if not here[held.queue]:
                del here[held.queue]
        self._freed += 1
        self._moved()

    def _moved(self) -> None:
        self._epoch += 1
        self._candidates.clear()
        self._rooms.clear()
        self._refusals.clear()

    # -- queries -------------------------------------------------------------------------
    def used(self, queue: str, profile: str | None = None) -> int:
        if profile is not None:
            return self.usage.get((queue, profile), 0)
        return self._total.get(queue, 0)

    def borrowed(self, queue: str, profile: str | None = None) -> int:
        spec = self.queues[queue]
        profiles = [profile] if profile is not None else self._all_profiles(spec)
        return sum(max(0, self.used(queue, p) - spec.nominal.get(p, 0)) for p in profiles)

    def _all_profiles(self, spec: QueueSpec) -> set[str]:
        return set(spec.nominal) | {p for (q, p) in self.usage if q == spec.name}

    def room(self, spec: QueueSpec, profile: str) -> int:
        """Chips `spec`'s queue may still take on `profile`: all of its unused nominal quota
        (lent chips come back by reclaim) plus what the rest of its cohort's pool has idle,
        capped by its borrowing limit."""
        memo = self._rooms.get((spec.name, profile))
        if memo is not None:
            return memo
        used = self.used(spec.name, profile)
        nominal = spec.nominal.get(profile, 0)
        pool = pool_used = 0
        for member in self._members[spec.cohort or f"/{spec.name}"]:
            pool += member.lends(profile)
            pool_used += max(0, self.used(member.name, profile)
                             - (member.nominal.get(profile, 0) - member.lends(profile)))
        # its own unused lendable chips are in the pool's idle part: not counted twice
        guaranteed = nominal - spec.lends(profile)
        own_lendable = max(0, spec.lends(profile) - max(0, used - guaranteed))
        room = max(0, nominal - used) + max(0, pool - pool_used - own_lendable)
        if spec.borrowing_limit is not None:
            room = min(room, nominal + spec.borrowing_limit - used)
        self._rooms[(spec.name, profile)] = room = max(0, room)
        return room

    def _profiles_for(self, spec: QueueSpec) -> tuple[str, ...]:
        return self._profiles or tuple(sorted(spec.nominal))

    # -- decisions (called by Scheduler) -------------------------------------------------
    def refuse(self, job: QueuedJob) -> NoFit | None:
        """Why `job`'s queue cannot take it now (a `NoQuota` NoFit), or None."""
        queue = self.queue_of(job)
        if queue is None:
            return None
        refused = queue_refusal(self.queues, queue, namespace_of_job_key(job.key), job.priority)
        if refused is not None:
            return NoFit(INADMISSIBLE, refused.message)
        spec = self.queues[queue]
        memo = (queue, _chips(job))
        if memo in self._refusals:  # usage has not moved since: the same answer
            return self._refusals[memo]
        self._refusals[memo] = why = self._refuse(spec, job)
        return why

    def _refuse(self, spec: QueueSpec, job: QueuedJob) -> NoFit | None:
        chips = _chips(job)
        rooms = {p: self.room(spec, p) for p in self._profiles_for(spec)}
        if any(r >= chips for r in rooms.values()):
            return None
        parts = []
        for p, r in rooms.items():
            nominal = spec.nominal.get(p, 0)
            parts.append(f"{self.used(spec.name, p)} of its {nominal} nominal {p} chips in use, "
                         f"{r} more it may take")
        where = f" (cohort {spec.cohort})" if spec.cohort else ""
        return NoFit(NO_QUOTA, f"queue {spec.name}{where} has {'; '.join(parts) or 'no quota'}:"
                     f" {chips} chips do not fit its quota")

    def within_nominal(self, job: QueuedJob) -> bool:
        """Whether admitting `job` keeps its queue within nominal on some profile."""
        queue = self.queue_of(job)
        spec = self.queues.get(queue) if queue is not None else None
        if spec is None:
            return False
        chips = _chips(job)
        return any(self.used(spec.name, p) + chips <= spec.nominal.get(p, 0)
                   for p in self._profiles_for(spec))

    def arrange(self, queue: Sequence[QueuedJob]) -> list[QueuedJob]:
        """The cycle's try order: jobs that fit their queue's unused nominal quota first, by
        the share of its nominal quota their queue would use once it and the guaranteed jobs
        of its queue ahead of it are admitted (each queue's own order kept), then borrowers
        by their queue's borrowed chips once it and every job of its queue ahead of it are
        admitted, over its weight (water-filling both times)."""
        ahead: dict[str | None, int] = {}
        guaranteed: dict[str | None, int] = {}
        keyed: list[tuple[int, float, int, QueuedJob]] = []
        for index, job in enumerate(queue):
            name = self.queue_of(job)
            spec = self.queues.get(name) if name is not None else None
            if spec is None:
                keyed.append((0, 0.0, index, job))
                continue
            chips = _chips(job)
            nominal = sum(spec.nominal.values())
            left = nominal - self.used(spec.name) - guaranteed.get(name, 0)
            cum = ahead.get(name, 0) + chips
            ahead[name] = cum
            over = self.used(spec.name) + cum - nominal
            # a job that fits what its queue's unused nominal quota has left after the
            # guaranteed jobs ahead of it goes ahead of every borrower (and of a borrower's
            # reservation), even behind a queue-mate too large for it
            if chips <= left:
                guaranteed[name] = guaranteed.get(name, 0) + chips
                # the queue furthest below its nominal quota first (water-filling again)
                keyed.append((0, (nominal - left + chips) / max(nominal, 1), index, job))
            else:
                keyed.append((1, over / spec.weight, index, job))
        keyed.sort(key=lambda k: k[:3])
        return [k[3] for k in keyed]

    def allocate_apart(self, job: QueuedJob, part: JobKey, allocator: Allocator, *,
                       avoid: Iterable[str] = ()) -> Placement | None:
        """Place one part of `job` where reclaim keeps working, or None (the caller then
        places it as usual): a job that borrows only on UltraServers that hold no chips of a
        queue within its nominal quota, a job within its nominal quota only on UltraServers
        that hold no borrower's chips (best fit, idle ones last, none of `avoid`). So borrowed
        chips gather on few UltraServers, and a lender's reclaim finds a whole one to free
        instead of borrowed chips scattered beside guaranteed jobs.

        Among UltraServers that suit it equally full, the first in fleet order: placements
        pack from one end of the fleet, so free chips gather at the other."""
        if (job.request.chips > allocator.largest_ultraserver()
                or self.queue_of(job) not in self.queues):
            return None
        borrows = not self.within_nominal(job)
        skip = set(avoid)
        first = [us for us in self._names if us not in skip and self._suits(us, borrows)]
        got = allocator.place_without(job.request, (), first) if first else None
        if not isinstance(got, Placement):
            return None
        return allocator.assign(part, got.chip_ids, job.request)

    def _suits(self, us: str, borrows: bool) -> bool:
        """Whether a borrower (`borrows`) or a guaranteed job goes to UltraServer `us` first:
        an idle one suits both; else a borrower only where every job borrows, and a
        guaranteed job only where none does."""
        here = self._on.get(us)
        if not here:
            return True
        if self._over is None or self._over[0] != self._epoch:
            self._over = (self._epoch, frozenset(q for q in self.queues if self.borrowed(q)))
        over = self._over[1]
        if borrows:
            return all(q in over for q in here)
        return not any(q in over for q in here)

    def victims(self, job: QueuedJob) -> list[QueuedJob]:
        """The running jobs `job` may preempt, best first: lowest priority, then the most
        recently admitted."""
        within = self.within_nominal(job)
        queue = self.queue_of(job)
        memo = (queue, job.priority, within)
        if memo in self._candidates:
            return self._candidates[memo]
        spec = self.queues.get(queue) if queue is not None else None
        order = list(self._held.values())
        found: list[tuple[int, int, QueuedJob]] = []
        for recency, held in enumerate(order):
            other = held.job
            if not other.preemptible or other.key == job.key or other.key in self._fresh:
                continue
            if held.queue == queue:
                if (spec is None or spec.within_queue == "LowerPriority") \
                        and other.priority < job.priority:
                    found.append((other.priority, -recency, other))
                continue
            if spec is None or held.queue is None or not within:
                continue
            theirs = self.queues.get(held.queue)
            if (theirs is None or spec.cohort is None or theirs.cohort != spec.cohort
                    or spec.reclaim_within_cohort == "Never" or not self.borrowed(theirs.name)):
                continue
            if spec.reclaim_within_cohort == "LowerPriority" and other.priority >= job.priority:
                continue
            found.append((other.priority, -recency, other))
        found.sort(key=lambda f: f[:2])
        out = [f[2] for f in found]
        self._candidates[memo] = out
        return out

    def reclaim_failed(self, job: QueuedJob) -> None:
        """No plan frees a domain for `job` now: spare its like a second try this cycle."""
        self._no_reclaim.add(self._reclaim_key(job))

    def may_preempt(self, job: QueuedJob) -> bool:
        if self._reclaim_key(job) in self._no_reclaim:
            return False
        return bool(self.victims(job))

    def _reclaim_key(self, job: QueuedJob) -> tuple[object, ...]:
        queue = self.queue_of(job)
        used = self._total.get(queue, 0) if queue is not None else 0
        # (the jobs admitted this cycle are no victims in it, but are in the next)
        return (queue, job.priority, job.request, used, self._grow, self._freed,
                self._free_at_start, len(self._fresh))


def _chips(job: QueuedJob) -> int:
    return job.request.chips * (job.replicas or 1)
