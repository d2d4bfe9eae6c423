"""The report's verdict: which policy did better on the trace, in plain words, ratios explained.

Why its own module: the figures table answers "how much", but a reader first
asks "so which is better, and by how much?". The answer is derived from
summary.json alone (pure, no plotting), so the HTML page and the command line
say the same thing and a test can check it. Differences within a small
tolerance count as ties: the simulator is deterministic, but a 0.3% gap in
mean completion time is noise of the trace, not a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# (key, what it measures, lower is better?, absolute tolerance, how to show a value)
METRICS: tuple[tuple[str, str, bool, float, str], ...] = (
    ("jobs_completed", "jobs completed", False, 0.0, "count"),
    ("jct_mean_s", "mean job completion time (submission to end)", True, 60.0, "hours"),
    ("queue_delay_mean_s", "mean wait in the queue", True, 60.0, "minutes"),
    ("large_jobs_queue_delay_mean_s", "large jobs' mean wait", True, 60.0, "minutes"),
    ("useful_utilization", "useful utilization (the trace's work over the fleet's capacity)",
     False, 0.001, "percent"),
    ("split_jobs_that_fit_one_ultraserver", "jobs split although they fit one UltraServer",
     True, 0.0, "count"),
    ("energy_kwh", "energy", True, 0.0, "mwh"),
)
RATIO_NAMES = {"jct_mean": "JCT mean", "large_wait": "Large-job wait",
               "useful_util": "Useful utilization"}
REL_TIE = 0.01  # differences under 1% are ties
REFERENCES = {
    "greedy": ("the greedy in-one-domain reference", "first fit inside one UltraServer, in "
               "arrival order, never split, with no checkpoint or restart overheads"),
    "fluid": ("the fluid reference", "chips fungible and no topology at all: a bound no real "
              "placement reaches"),
}


@dataclass
class Verdict:
    headline: str
    points: list[str] = field(default_factory=list)  # one sentence per figure that differs
    ties: list[str] = field(default_factory=list)  # the figures on which the policies tie
    ratios: dict[str, list[str]] = field(default_factory=dict)  # policy -> explained ratios


def show(value: float | None, how: str) -> str:
    if value is None:
        return "n/a"
    if how == "hours":
        return f"{value / 3600:,.2f} h"
    if how == "minutes":
        return f"{value / 60:,.1f} min"
    if how == "percent":
        return f"{value:.1%}"
    if how == "mwh":
        return f"{value / 1000:,.2f} MWh"
    return f"{value:,.0f}"


def _compare(key: str, lower_better: bool, tol: float, a: float, b: float) -> int:
    """+1 when `a` is better than `b`, -1 when worse, 0 for a tie."""
    if abs(a - b) <= max(tol, REL_TIE * max(abs(a), abs(b))):
        return 0
    return 1 if (a < b) == lower_better else -1


def _sentence(label: str, how: str, a: float, b: float, who: str, other: str) -> str:
    if b and how != "count":
        change = f"{abs(a - b) / abs(b):.0%} {'lower' if a < b else 'higher'}"
    else:
        change = f"{'fewer' if a < b else 'more'} by {abs(a - b):,.0f}"
    return f"{label}: {show(a, how)} under {who} against {show(b, how)} under {other} ({change})."


def compare(summary: Mapping[str, Mapping[str, Any]], who: str = "ultraplane",
            other: str = "first-fit") -> Verdict:
    """The verdict of `who` against `other` (or against the references when alone)."""
    ratios = {p: explain_ratios(p, s) for p, s in summary.items()}
    if other not in summary and "static-peak" in summary:  # a replay with inference services
        other = "static-peak"
    if who not in summary or other not in summary:
        only = next(iter(summary), "")
        return Verdict(_alone(only, summary.get(only, {})), ratios=ratios)
    a, b = summary[who], summary[other]
    wins: list[str] = []
    losses: list[str] = []
    ties: list[str] = []
    for key, label, lower, tol, how in METRICS:
        va, vb = a.get(key), b.get(key)
        if va is None or vb is None or (key.startswith("large_") and not a.get("large_jobs")):
            continue
        verdict = _compare(key, lower, tol, float(va), float(vb))
        if verdict == 0:
            ties.append(label)
        else:
            (wins if verdict > 0 else losses).append(_sentence(label.capitalize(), how,
                                                               float(va), float(vb), who, other))
    if not wins and not losses:
        head = (f"{who} and {other} performed the same on this trace: every figure compared "
                "is within 1% (or a minute, for times) of the other.")
    elif wins and not losses:
        head = f"{who} did better than {other} on this trace, and worse on nothing."
    elif losses and not wins:
        head = f"{who} did worse than {other} on this trace, and better on nothing."
    else:
        head = (f"Mixed result on this trace: {who} did better than {other} on {len(wins)} "
                f"figure(s) and worse on {len(losses)}.")
    points = [f"Better: {w}" for w in wins] + [f"Worse: {x}" for x in losses]
    return Verdict(head, points, ties, ratios)


def _alone(policy: str, s: Mapping[str, Any]) -> str:
    r = s.get("jct_mean_vs_greedy")
    if r is None:
        return f"Only {policy} was replayed; no job completed, so there is nothing to compare."
    word = "longer" if r > 1 else "shorter"
    return (f"Only {policy} was replayed: its jobs took {abs(r - 1):.0%} {word} on average than "
            f"in {REFERENCES['greedy'][0]} (ratios below).")


def explain_ratios(policy: str, s: Mapping[str, Any]) -> list[str]:
    """One sentence per `*_vs_*` ratio: what it compares, which way is better."""
    out: list[str] = []
    for ref, (name, _) in REFERENCES.items():
        for key, what, lower in (
            (f"jct_mean_vs_{ref}", "jobs took {r:.2f} times as long from submission to end", True),
            (f"large_wait_vs_{ref}", "large jobs waited {r:.2f} times as long for chips", True),
            (f"useful_util_vs_{ref}", "the fleet did {r:.2f} times the useful work", False),
        ):
            if key not in s:
                continue
            r = s[key]
            short = RATIO_NAMES[key.partition("_vs_")[0]]
            if r is None:
                out.append(f"{short} x n/a vs {ref}: {name} has nothing to divide by here "
                           "(no large job waited there, or no job completed).")
                continue
            good = "lower" if lower else "higher"
            delta = "the same" if abs(r - 1) < 0.005 else (
                f"{abs(r - 1):.0%} {'more' if r > 1 else 'less'}")
            out.append(f"{short} x{r:.2f} vs {ref}: under {policy}, {what.format(r=r)} as in "
                       f"{name} ({delta}; {good} is better).")
    return out
