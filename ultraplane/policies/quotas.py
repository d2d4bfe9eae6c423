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

- Cohorts may nest (`ultraplane.policies.cohorts`): borrowing is bounded at every level of the
  tree, reclaim reaches a queue of another cohort when its subtree borrows where the two
  meet, and fair shares are water-filled level by level. A cohort may remember its queues'
  usage with a half-life (`ultraplane.policies.usagedecays`): borrowers are then ordered by
  what they borrow plus what they used recently, over weight.

The book is one object in four modules: here the queues, their rights and the admission rules
(`refuse`, `within_nominal`, `arrange`); the ledger of what jobs hold in
`ultraplane.policies.queueusages`, reclaim and placing borrowers apart in
`ultraplane.policies.reclaims`, and the decayed usage in `ultraplane.policies.usagedecays` (mixins: the book is one dataclass the scheduler and the
adapters share, and every part reads the same fields).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from ultraplane.ids import JobKey, namespace_of_job_key
from ultraplane.placement.allocator import NoFit
from ultraplane.policies.cohorts import CohortSpec, CohortTree
from ultraplane.policies.queueusages import QueueUsage
from ultraplane.policies.reclaims import Reclaims
from ultraplane.policies.usagedecays import UsageDecay

if TYPE_CHECKING:
    from ultraplane.policies.queueusages import _Held
    from ultraplane.workloads import QueuedJob

__all__ = ["INADMISSIBLE", "NO_QUOTA", "FairPreemption", "QueueRefusal", "QueueSpec", "QuotaBook", "default_queues",
           "equal_shares", "queue_refusal"]

NO_QUOTA: Final = "NoQuota"  # the NoFit kind of a job its queue's quota does not admit now
INADMISSIBLE: Final = "Inadmissible"  # its queue refuses it (namespace, priority, no queue)

Reclaim = Literal["Never", "LowerPriority", "Any"]
WithinQueue = Literal["Never", "LowerPriority"]
FairPreemption = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare", "Never"]


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
    # fair-sharing preemption (`ultraplane.scheduling.fairsharing`): the rule a job of this
    # queue below its fair share preempts by, and how long a job of this queue preempted for
    # fairness is spared before it can be again
    fair_preemption: FairPreemption = "LessThanOrEqualToFinalShare"
    fair_preemption_interval_s: float = 600.0

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
        if not (self.fair_preemption_interval_s >= 0
                and math.isfinite(self.fair_preemption_interval_s)):
            raise ValueError(f"queue {self.name}: the fair-sharing preemption interval must "
                             "be >= 0 seconds")

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
class _Arranged:
    """What `arrange` counted, for `arrange_after`: the usage epoch it read, each queue's
    queued chips and guaranteed chips, and the place of the last job in its order."""

    epoch: int
    ahead: dict[str | None, int] = field(default_factory=dict)
    guaranteed: dict[str | None, int] = field(default_factory=dict)
    last: tuple[int, float] | None = None


@dataclass
class QuotaBook(QueueUsage, Reclaims, UsageDecay):
    """The queues and what each job holds against them; `Scheduler` keeps it current."""

    specs: Sequence[QueueSpec]
    # cohorts with a parent, a pool of their own, limits, a weight or a usage half-life
    # (`ultraplane.policies.cohorts`); a cohort that queues name and none defines is a root
    cohorts: Sequence[CohortSpec] = ()
    queues: dict[str, QueueSpec] = field(init=False)
    tree: CohortTree = field(init=False)
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
    _arranged: _Arranged | None = field(init=False, default=None)  # the last `arrange`'s counts
    # decayed usage (`ultraplane.policies.usagedecays`): queue -> chip-seconds, and when
    _decayed: dict[str, float] = field(init=False, default_factory=dict)
    _decayed_at: float | None = field(init=False, default=None)
    _released: dict[str, int] = field(init=False, default_factory=dict)  # since `advance`

    def __post_init__(self) -> None:
        self.replace(self.specs, self.cohorts)

    def replace(self, specs: Sequence[QueueSpec],
                cohorts: Sequence[CohortSpec] | None = None) -> None:
        """Take a new set of queues (one was created, edited or deleted), and of cohorts
        (None: the same). What running jobs hold stays counted against the queue they were
        admitted to. Parents that form a cycle: `CohortCycleError`, and nothing changes."""
        queues: dict[str, QueueSpec] = {}
        members: dict[str, list[QueueSpec]] = {}
        for spec in sorted(specs, key=lambda q: q.name):
            if spec.name in queues:
                raise ValueError(f"queue {spec.name!r} is listed twice")
            queues[spec.name] = spec
            members.setdefault(spec.cohort or f"/{spec.name}", []).append(spec)
        cohorts = self.cohorts if cohorts is None else cohorts
        tree = CohortTree(members, cohorts)
        self.specs, self.queues, self._members, self._defaults = (
            tuple(specs), queues, members, default_queues(queues.values()))
        self.cohorts, self.tree = tuple(cohorts), tree
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
        return self.queue_named(None, namespace_of_job_key(job.key))

    def queue_named(self, named: str | None, namespace: str) -> str | None:
        """The queue a job that names `named` (or none) in `namespace` uses: `named`, else
        the namespace's default, else none (`queue_of` by what a job says)."""
        if named is not None:
            return named
        return self._defaults.get(namespace) if self._defaults else None

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
        arranged = _Arranged(self._epoch)
        keyed = [(*self._share(job, arranged), index, job) for index, job in enumerate(queue)]
        keyed.sort(key=lambda k: k[:3])
        arranged.last = (keyed[-1][0], keyed[-1][1]) if keyed else None
        self._arranged = arranged
        return [k[3] for k in keyed]

    def arrange_after(self, arrivals: Sequence[QueuedJob]) -> list[QueuedJob] | None:
        """`arrivals` (in queue order, each after every job `arrange` was last given, so last
        in its own queue) in the order a new `arrange` would try them, when that puts them
        after every job it was given: usage has not moved since, so neither has any of those
        jobs. None otherwise (the caller arranges the whole queue again). Costs the arrivals
        only, so a deep queue is not arranged again for every job that joins it."""
        last = self._arranged
        if last is None or last.epoch != self._epoch:
            return None
        arranged = _Arranged(last.epoch, dict(last.ahead), dict(last.guaranteed))
        keyed = [(*self._share(job, arranged), index, job) for index, job in enumerate(arrivals)]
        keyed.sort(key=lambda k: k[:3])
        if keyed and last.last is not None and (keyed[0][0], keyed[0][1]) < last.last:
            return None
        arranged.last = (keyed[-1][0], keyed[-1][1]) if keyed else last.last
        self._arranged = arranged
        return [k[3] for k in keyed]

    def _share(self, job: QueuedJob, arranged: _Arranged) -> tuple[int, float]:
        """`job`'s place in `arrange`'s order after the jobs `arranged` has counted (then
        counted too): (0, share of nominal) for a guaranteed job, (1, borrowed over weight)
        for a borrower, (0, 0.0) for a job outside the queues."""
        name = self.queue_of(job)
        spec = self.queues.get(name) if name is not None else None
        if spec is None:
            return 0, 0.0
        ahead, guaranteed = arranged.ahead, arranged.guaranteed
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
            return 0, (nominal - left + chips) / max(nominal, 1)
        if self._decayed:  # a remembering cohort: recent usage counts as if still borrowed
            return 1, (over + self.recent_chips(spec.name)) / spec.weight
        return 1, over / spec.weight


def _chips(job: QueuedJob) -> int:
    return job.request.chips * (job.replicas or 1)
