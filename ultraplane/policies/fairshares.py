"""Fair shares: each team's weighted max-min share of a fleet, capped at what it wants.

Why a share and not borrowed chip-time: a team that wanted a little more for an hour should
get a little, not as much as a team that wanted the whole fleet for a month. Fairness is
measured against what each team should have had at each instant, and that is water-filling:
raise one level for every team that wants chips, each team getting `level * weight` until it
reaches its demand; the teams that are capped free the rest for the others. So no team gets
more than it wants, the shares add up to the fleet (or to the total demand, when that is
smaller), and no team can gain without taking from one whose share per weight is not larger
(weighted max-min, as Kueue's fair sharing and DRF with one resource).

Pure: the replay's ledger reads it to score a run, the fair-sharing policy
(`ultraplane.scheduling.fairsharing`) to decide who is owed chips, and the queues' status to
show it (`queue_fair_shares`: each tenant queue's share of its cohort; down a tree of cohorts,
level by level, `tree_fair_shares`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ultraplane.ids import namespace_of_job_key

if TYPE_CHECKING:
    from ultraplane.policies.cohorts import CohortTree
    from ultraplane.policies.quotas import QueueSpec, QuotaBook
    from ultraplane.workloads import QueuedJob

__all__ = ["fair_shares", "jain", "queue_fair_shares", "tree_fair_shares", "wanted_fair_shares"]


def fair_shares(demand: Mapping[str, float], weight: Mapping[str, float],
                fleet: float) -> dict[str, float]:
    """Each team's weighted max-min share of `fleet` chips, capped at its `demand`.

    Teams that want nothing (demand <= 0) get 0. A team missing from `weight` weighs 1; a
    weight must be positive."""
    shares = {team: 0.0 for team in demand}
    wanting = [t for t, d in demand.items() if d > 0]
    for t in wanting:
        if weight.get(t, 1.0) <= 0:
            raise ValueError(f"team {t}: weight must be positive")
    # the teams capped first are those whose demand per weight is smallest
    wanting.sort(key=lambda t: demand[t] / weight.get(t, 1.0))
    left = max(fleet, 0.0)
    total_weight = sum(weight.get(t, 1.0) for t in wanting)
    for i, t in enumerate(wanting):
        w = weight.get(t, 1.0)
        level = left / total_weight
        if demand[t] <= level * w:
            shares[t] = float(demand[t])
        else:
            # every team from here on wants more than the level gives: split what is left
            for u in wanting[i:]:
                shares[u] = level * weight.get(u, 1.0)
            break
        left -= shares[t]
        total_weight -= w
    return shares


def jain(xs: list[float]) -> float:
    """Jain's index of `xs`: 1 when all are equal, 1/n when one holds everything."""
    squares = sum(x * x for x in xs)
    return (sum(xs) ** 2 / (len(xs) * squares)) if squares else 1.0


def queue_fair_shares(book: QuotaBook, queued: Iterable[QueuedJob]) -> dict[str, float]:
    """Each tenant queue's fair share of its cohort's nominal chips, by weight, capped at its
    demand (the chips its running jobs hold and its `queued` jobs want); a queue of no cohort
    has none (it borrows and lends nothing)."""
    wanted: Counter[tuple[str | None, str]] = Counter()
    for job in queued:
        wanted[(job.queue, namespace_of_job_key(job.key))] += job.request.chips * (job.replicas or 1)
    return wanted_fair_shares(book, wanted)


def wanted_fair_shares(book: QuotaBook, wanted: Mapping[tuple[str | None, str], int]
                       ) -> dict[str, float]:
    """`queue_fair_shares` from the chips the queued jobs want, tallied by (the queue a job
    names, its namespace), as the scheduler's roster keeps them: a few entries to read
    instead of every job of a deep queue."""
    demand = {q: float(book.used(q)) for q in book.queues}
    for (named, namespace), chips in wanted.items():
        queue = book.queue_named(named, namespace)
        if queue in demand:
            demand[queue] += chips
    tree = book.tree
    if tree.flat:
        cohorts: dict[str, list[QueueSpec]] = {}
        for spec in book.queues.values():
            if spec.cohort is not None:
                cohorts.setdefault(spec.cohort, []).append(spec)
        out: dict[str, float] = {}
        for members in cohorts.values():
            fleet = sum(sum(s.nominal.values()) for s in members)
            out.update(fair_shares({s.name: demand[s.name] for s in members},
                                   {s.name: s.weight for s in members}, fleet))
        return out
    return tree_fair_shares(tree, demand)


def tree_fair_shares(tree: CohortTree, demand: Mapping[str, float]) -> dict[str, float]:
    """Each queue's fair share down a tree of cohorts, level by level: a root's nominal
    chips (its own pool and every queue's below it) water-filled among its queues and child
    cohorts by weight, each capped at its demand (a cohort's: its subtree's); then each child
    cohort's share water-filled among its own children the same way. Queues of no cohort
    have none."""
    out: dict[str, float] = {}

    def wanted(cohort: str) -> float:
        return (sum(demand.get(q.name, 0.0) for q in tree.members.get(cohort, ()))
                + sum(wanted(c) for c in tree.children[cohort]))

    def split(cohort: str, chips: float) -> None:
        # a child cohort's key cannot be a queue's (queue names are DNS labels)
        want = {q.name: demand.get(q.name, 0.0) for q in tree.members.get(cohort, ())}
        weight = {q.name: q.weight for q in tree.members.get(cohort, ())}
        for child in tree.children[cohort]:
            want[f"cohort:{child}"] = wanted(child)
            weight[f"cohort:{child}"] = tree.specs[child].weight
        for key, share in fair_shares(want, weight, chips).items():
            if key.startswith("cohort:"):
                split(key.removeprefix("cohort:"), share)
            else:
                out[key] = share

    for root in sorted(tree.specs):
        if tree.specs[root].parent is None and not root.startswith("/"):
            split(root, float(tree.nominal_total(root)))
    return out
