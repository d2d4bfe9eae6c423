"""Fair-sharing preemption: a queue below its fair share takes chips back, from one domain, from
queues above theirs.

Why: quotas and reclaim guarantee each queue its nominal chips, but what a cohort lends goes to
whoever asks first. Where jobs run for days, a queue that borrowed first keeps the cohort's idle
chips long after others want them, and shares even out only as its jobs end. So, as Kueue's fair
sharing does, a job whose queue holds less than its fair share (its weighted max-min share of
its cohort's nominal chips, capped at what the queue's submitted, unfinished jobs want:
`ultraplane.policies.fairshares`), that keeps its queue within that share once admitted, and
that gets no chips otherwise (its queue's quota has no room, `NoQuota`, or no domain has room,
`NoCapacity`, reclaim included), may preempt running jobs of queues of its cohort that borrow
and hold more than their fair share. Within its share: so after a preemption the preemptor
is at or below its share and, by the default strategy, the victim's queue at or above its
own, and neither has a claim on the other until demand moves (no ping-pong).

- **One domain.** The victims are planned inside one domain the job can use, as reclaim's are
  (`ultraplane.placement.preemption`): the chips freed are the chips it runs on, never chips
  scattered over UltraServers that together are "enough".
- **Strategy** (the preemptor's queue's `fair_preemption`, a share being chips held over fair
  share): `LessThanOrEqualToFinalShare` (default) takes chips only while each victim's queue
  keeps at least its fair share and the preemptor's share, its job admitted, is no larger than
  the victim queue's after the preemption; `LessThanInitialShare` only needs the preemptor's
  share after to be below the victim queue's before; `Never` turns it off. Its
  `reclaim_within_cohort` applies too (`Never`: none; `LowerPriority`: lower-priority victims).
- **Least work lost.** Victims that lose the least work since their last checkpoint (chips x
  seconds; a job without checkpoints loses all it ran) go first; the preempted job waits again
  with its rank and resumes from that checkpoint.
- **No thrash.** A job preempted for fairness is no victim of it again until its queue's
  `fair_preemption_interval_s` (default 600 s) has passed; jobs that started at this instant
  are no victims either, nor jobs predicted to end within that interval (their chips come
  free soon without losing any work).
- **Trees and memory.** With nested cohorts, victims come from anywhere in the preemptor's
  tree (fair shares are water-filled level by level); in a cohort that remembers usage
  (`ultraplane.policies.usagedecays`), the jobs of queues with the most decayed usage over
  weight go first.
- **Quotas hold.** After the eviction the job must pass its queue's quota (borrowing and
  lending limits) like any other, and a power budget's headroom; else the victims go back.

It needs the caller's clock (the interval, the work since a checkpoint): a cycle without one
preempts nothing for fairness. Without tenant queues it does nothing.
"""

from __future__ import annotations

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.placement.preemption import plan_preemption
from ultraplane.policies.fairshares import wanted_fair_shares
from ultraplane.policies.quotas import NO_QUOTA, FairPreemption, QueueSpec, QuotaBook
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.evictions import Evicted, Evictions
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["FairSharing", "allows"]

_REPLANS = 4  # plans tried per job when a combined plan breaks the strategy for a queue


def allows(strategy: FairPreemption, mine_after: float, held: float, left: float,
           fair: float) -> bool:
    """Whether a queue whose share, its job admitted, is `mine_after` may take chips from a
    queue holding `held` chips (`left` after the preemption) with fair share `fair`."""
    if strategy == "Never" or fair <= 0:
        return False
    if strategy == "LessThanInitialShare":
        return mine_after < held / fair
    return left >= fair and mine_after <= left / fair


class FairSharing:
    """Fair-sharing preemption for one scheduler (its `preemption` switch turns it off too)."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 quotas: QuotaGate, evictions: Evictions, power: PowerGate) -> None:
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._quotas = quotas
        self._evictions = evictions
        self._power = power
        self._shares: dict[str, float] | None = None  # this cycle's, once asked
        self._last: dict[JobKey, float] = {}  # victim -> when it was last preempted for fairness
        self._failed: set[tuple[object, ...]] = set()  # plans found for nothing, by what they read
        self._exposed_memo: tuple[tuple[int, float], dict[str, list[tuple[str, QueuedJob]]]] \
            | None = None

    def begin(self) -> None:
        """At a cycle's start: demand may have moved (submits, cancels, ends)."""
        self._shares = self._exposed_memo = None
        if len(self._failed) > 10_000:
            self._failed.clear()
        now = self._state.now
        if now is not None and len(self._last) > 10_000:
            self._last = {k: t for k, t in self._last.items() if now - t < 86_400}

    def shares(self) -> dict[str, float]:
        """Queue -> its fair share of chips now (queues of no cohort have none)."""
        book = self._quotas.book
        if book is None:
            return {}
        if self._shares is None:
            self._shares = wanted_fair_shares(book, self._roster.queued_chips)
        return self._shares

    def may_preempt(self, job: QueuedJob) -> bool:
        """Whether `job` is one fair sharing may preempt for now (its queue below its share)."""
        book = self._quotas.book
        spec = self._spec(job)
        if book is None or spec is None:
            return False
        return (book.used(spec.name) + _chips(job) <= self.shares().get(spec.name, 0.0)
                and self._memo(job, spec, book) not in self._failed
                and bool(self._exposed(book).get(_tree_of(book, spec))))

    def _spec(self, job: QueuedJob) -> QueueSpec | None:
        book = self._quotas.book
        if (book is None or not self._evictions.enabled or self._state.now is None
                or job.replicas is not None):
            return None
        queue = book.queue_of(job)
        spec = book.queues.get(queue) if queue is not None else None
        if (spec is None or spec.cohort is None or spec.fair_preemption == "Never"
                or spec.reclaim_within_cohort == "Never"):
            return None
        return spec

    def _memo(self, job: QueuedJob, spec: QueueSpec, book: QuotaBook) -> tuple[object, ...]:
        return (spec.name, job.request, job.priority, book.usage_epoch, self._state.now)

    def preempt_for(self, job: QueuedJob, nofit: NoFit, result: CycleResult
                    ) -> tuple[Placement, ...] | NoFit:
        """Place `job`, which got `nofit`, on chips fair sharing takes for it from one domain;
        `nofit` when its queue is not below its share or no plan keeps to the strategy."""
        if nofit.kind not in (NO_QUOTA, "NoCapacity") or not self.may_preempt(job):
            return nofit
        book, spec = self._quotas.book, self._spec(job)
        assert book is not None and spec is not None  # may_preempt said so
        memo = self._memo(job, spec, book)
        planned = self._plan(job, spec, book)
        if planned is None:
            self._failed.add(memo)
            return nofit
        victims, chips = planned
        evicted: Evicted = []
        why = {v.key: self._why(job, spec, v, book) for v in victims}
        self._evictions.evict([v.key for v in victims], evicted)
        placed = None
        if book.refuse(job) is None:
            placed = self._allocator.assign(job.key, chips, job.request)
            if self._power.refuses(job, (placed,)) is not None:
                self._allocator.release(job.key)
                placed = None
        if placed is None:
            for key in self._evictions.undo(evicted):  # (could not be put back)
                result.preempted.append((key, job.key))
                result.fair_preempted[key] = why[key]
            self._failed.add(memo)
            return nofit
        now = self._state.now
        assert now is not None
        for victim, _ in evicted:
            self._last[victim.key] = now
            result.preempted.append((victim.key, job.key))
            result.fair_preempted[victim.key] = why[victim.key]
        return (placed,)

    def _plan(self, job: QueuedJob, spec: QueueSpec, book: QuotaBook
              ) -> tuple[list[QueuedJob], tuple[str, ...]] | None:
        """The victims in one domain and the chips `job` gets there, or None."""
        shares = self.shares()
        mine_after = (book.used(spec.name) + _chips(job)) / shares[spec.name]
        ranked = self._candidates(job, spec, book, mine_after)
        for _ in range(_REPLANS):
            if not ranked:
                return None
            pool = {v.key: i - len(ranked) for i, v in enumerate(ranked)}
            plan = plan_preemption(self._allocator, job.request, 0, pool, in_order=True)
            if isinstance(plan, NoFit) or not plan.victims:
                return None  # (no victims: the job fits elsewhere; its quota is the refusal)
            victims = [self._roster.running[k] for k in plan.victims]
            taken: dict[str, int] = {}
            for v in victims:
                queue = book.queue_of(v)
                assert queue is not None
                taken[queue] = taken.get(queue, 0) + _chips(v)
            broken = [q for q, n in taken.items()
                      if not allows(spec.fair_preemption, mine_after, book.used(q),
                                    book.used(q) - n, shares.get(q, 0.0))]
            if not broken:
                return victims, tuple(str(c) for c in plan.placement.chip_ids)
            # spare the largest victim of each queue it would take too much from, and again
            drop = {max((v for v in victims if book.queue_of(v) == q),
                        key=lambda v: (_chips(v), v.key)).key for q in broken}
            ranked = [v for v in ranked if v.key not in drop]
        return None

    def _candidates(self, job: QueuedJob, spec: QueueSpec, book: QuotaBook,
                    mine_after: float) -> list[QueuedJob]:
        """The running jobs `job` may preempt for fairness, each alone within the strategy,
        the least work lost first, then the lowest priority, then the latest started."""
        shares = self.shares()
        found = []
        for queue, other in self._exposed(book).get(_tree_of(book, spec), ()):
            if queue == spec.name:
                continue
            if spec.reclaim_within_cohort == "LowerPriority" and other.priority >= job.priority:
                continue
            held = book.used(queue)
            if allows(spec.fair_preemption, mine_after, held, held - _chips(other),
                      shares.get(queue, 0.0)):
                found.append(other)
        return found

    def _exposed(self, book: QuotaBook) -> dict[str, list[tuple[str, QueuedJob]]]:
        """Cohort -> the running jobs fair sharing may preempt at all now, best first, each
        with its queue: one-gang preemptible jobs of queues that borrow and hold more than
        their fair share, started before now and not preempted for fairness within their
        queue's interval (the same for every job tried until usage or the clock moves)."""
        now = self._state.now
        assert now is not None
        stamp = (book.usage_epoch, now)
        if self._exposed_memo is not None and self._exposed_memo[0] == stamp:
            return self._exposed_memo[1]
        shares = self.shares()
        over = {q for q, spec in book.queues.items()
                if spec.cohort is not None and book.used(q) > shares.get(q, 0.0)
                and book.borrowed(q)}
        started, ends = self._roster.since, self._roster.ends
        found: dict[str, list[tuple[float, float, int, float, str, str, QueuedJob]]] = {}
        if over:
            for other in self._roster.running.values():
                queue = book.queue_of(other)
                if queue not in over or not other.preemptible or other.replicas is not None:
                    continue
                theirs = book.queues[queue]
                since = started.get(other.key)
                last = self._last.get(other.key)
                end = ends.get(other.key)
                if (since is None or since >= now
                        or (last is not None and now - last < theirs.fair_preemption_interval_s)
                        or (end is not None and end - now < theirs.fair_preemption_interval_s)):
                    continue
                ran = now - since
                lost = (ran % other.checkpoint_s if other.checkpoint_s else ran) * _chips(other)
                # a remembering cohort's most recent users first (0 for every queue without)
                recent = -book.recent_chips(queue) / theirs.weight
                found.setdefault(_tree_of(book, theirs), []).append(
                    (recent, lost, other.priority, -since, other.key, queue, other))
        out = {cohort: [(f[5], f[6]) for f in sorted(jobs, key=lambda f: f[:5])]
               for cohort, jobs in found.items()}
        self._exposed_memo = (stamp, out)
        return out

    def _why(self, job: QueuedJob, spec: QueueSpec, victim: QueuedJob, book: QuotaBook) -> str:
        shares = self.shares()
        theirs = book.queue_of(victim)
        assert theirs is not None
        return (f"Preempted for fair sharing: queue {spec.name} held {book.used(spec.name)} "
                f"chips, below its fair share of {shares[spec.name]:.0f}, and took chips for "
                f"job {job.key} from queue {theirs}, which held {book.used(theirs)}, above its "
                f"fair share of {shares.get(theirs, 0.0):.0f}; requeued, it resumes from its "
                "last checkpoint.")


def _tree_of(book: QuotaBook, spec: QueueSpec) -> str:
    """The root cohort of `spec`'s tree of cohorts (its cohort, when cohorts are flat)."""
    return book.tree.root(spec.cohort) if spec.cohort is not None else ""


def _chips(job: QueuedJob) -> int:
    return job.request.chips * (job.replicas or 1)
