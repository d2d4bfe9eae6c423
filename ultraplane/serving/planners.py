"""The planner: how many replicas a service needs, and how low their chips may be capped.

Why in the core and pure: the operator, the embedded API and the replay must scale a service
alike, so the decision is a function of what a cluster observes (per-interval request counts
and token mixes from the engines' metrics), the service's autoscaling spec and the last
recommendations it returned; it reads no clock and keeps no state of its own.

The rules, each stated so a reader can check a decision by hand:

- Forecast. When most pairs of the window's intervals rise (Kendall's tau >= `TREND_TAU`),
  every interval is moved up the robust line through them (Theil-Sen) to one start-up time
  past the window's end, its burst above the line kept: a replica asked for now serves only
  then. Without such a rise nothing moves; scale-downs come from the window forgetting a
  peak, and then wait out the delay.
- Size. The fewest replicas, between min and max, such that one replica taking an even share
  of the forecast window plus `headroom` (default `HEADROOM`) keeps at least 99% of its
  requests within both p99 objectives (`estimates.estimate`). The window's bursts are in it,
  so a burst seen in the window is a burst sized for.
- Backlog. Work already queued (`backlog_s`, what the engines report waiting) must drain
  within one start-up time: its requests are added to every interval's forecast rate, spread
  over that time. Without it a burst's queue outlives the burst on replicas sized for the
  arrivals alone.
- Delay. The desired count is the largest recommendation of the last `scaleDownDelaySeconds`
  (Kubernetes' scale-down stabilization): scale-ups at once, scale-downs once they have held.
- Cap. The lowest per-chip cap on the profile's range (in `CAP_STEP_W` steps) at which the
  replicas serving now (fewer when it scales down: that takes effect at once) still meet
  both objectives on the same forecast plus headroom: the slack of a whole replica, of the scale-down delay and of minReplicas goes to energy, never
  the margin for a burst (a cap set for the last minute's lull is a miss when the burst
  comes before the next tick). A cap at the chip's peak is no cap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ultraplane.serving.estimates import estimate
from ultraplane.serving.mixes import Observation, TokenMix, merge_mixes
from ultraplane.serving.replicas import Replica

__all__ = ["CAP_STEP_W", "HEADROOM", "TREND_TAU", "Autoscaling", "Decision",
           "Objective", "meets", "plan"]

HEADROOM = 0.10  # load added to the forecast before sizing and capping
CAP_STEP_W = 50.0  # cap ladder step, per chip
QUANTILE = 0.99  # the objectives are p99s
TREND_TAU = 0.5  # Kendall's tau a rise needs before it is projected


@dataclass(frozen=True)
class Objective:
    """p99 time to first token and time per output token, in milliseconds."""

    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class Autoscaling:
    """An InferenceJob's `spec.autoscaling`."""

    min_replicas: int
    max_replicas: int
    objective: Objective
    scale_down_delay_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("autoscaling needs 0 <= minReplicas <= maxReplicas, maxReplicas >= 1")


@dataclass(frozen=True)
class Decision:
    """What the planner wants, why, and the recommendations to hand back next tick."""

    replicas: int
    cap_watts: float | None
    reason: str
    forecast_rate: float  # requests/s one start-up time ahead, headroom included
    attainment: float  # predicted share of requests within both objectives at `replicas`
    history: tuple[tuple[float, int], ...]  # (time, recommendation) within the delay


def meets(replica: Replica, load: Sequence[tuple[float, float]], mixes: Sequence[TokenMix],
          objective: Objective, cap: float | None = None,
          backlog_s: float = 0.0) -> tuple[bool, float]:
    """Whether one replica serving `load` (from a queue of `backlog_s` seconds of prefill
    work) keeps 99% of requests within each objective, and the share within both."""
    # (rounded to a nanosecond and a nano-request/s: the same load computed from another
    # clock's times differs in its last bits)
    return _meets(replica, tuple((round(float(s), 9), round(float(r), 9)) for s, r in load),
                  tuple(mixes), objective, cap, round(max(backlog_s, 0.0), 6))


# Why a cache: a service's ticks ask the same questions again (a steady or recurring load,
# the same candidate counts), and a day's replay asks thousands. The answer is a pure
# function of its arguments; mixes are keyed by identity and held, so a key is never reused.
@lru_cache(maxsize=16_384)
def _meets(replica: Replica, load: tuple[tuple[float, float], ...], mixes: tuple[TokenMix, ...],
           objective: Objective, cap: float | None, backlog_s: float) -> tuple[bool, float]:
    e = estimate(replica, mixes, load, cap, backlog_s=backlog_s)
    ttft = e.ttft_exceedance(objective.ttft_ms / 1e3)
    tpot = e.tpot_exceedance(objective.tpot_ms / 1e3)
    return ttft <= 1.0 - QUANTILE and tpot <= 1.0 - QUANTILE, (1.0 - ttft) * (1.0 - tpot)


def _forecast(window: Sequence[Observation], horizon_s: float) -> tuple[list[float], float]:
    """Each interval's rate moved up the window's rising trend to `horizon_s` past its end,
    and that trend's slope (requests/s per second; 0 when there is none).

    A trend is a rise most pairs of intervals agree on: Kendall's tau of the rates against
    time at least `TREND_TAU` (the Mann-Kendall test's statistic), with Theil-Sen's slope, the
    median of the pairwise slopes (Sen, JASA 1968). A burst after a lull is not a ramp."""
    mids = np.array([o.start_s + o.seconds / 2.0 for o in window])
    rates = np.array([o.rate for o in window])
    i, j = np.triu_indices(rates.size, k=1)
    slopes = (rates[j] - rates[i]) / (mids[j] - mids[i])
    tau = float(np.sign(slopes).mean()) if slopes.size else 0.0
    slope = max(float(np.median(slopes)), 0.0) if tau >= TREND_TAU else 0.0
    end = window[-1].start_s + window[-1].seconds
    return [float(r + slope * (end + horizon_s - m)) for r, m in zip(rates, mids, strict=True)], slope


@lru_cache(maxsize=4_096)
def _merged(mixes: tuple[TokenMix, ...], requests: tuple[int, ...]) -> TokenMix:
    """The window's mix (the same object for the same window: `meets` caches by it)."""
    return merge_mixes(mixes, requests)


@lru_cache(maxsize=4_096)
def _work_per_prompt_token(replica: Replica, whole: TokenMix) -> float:
    """One replica's prefill seconds per prompt token of `whole`."""
    return estimate(replica, whole, 1.0).utilization / whole.mean_prompt


def _guess(replica: Replica, window: Sequence[Observation], rates: Sequence[float],
           mixes: Sequence[TokenMix], whole: TokenMix, headroom: float) -> int:
    """Where the search starts: the replicas that hold the busiest intervals carrying 1% of
    the requests at 90% prefill load (one replica's prefill work per request, scaled by each
    interval's mean prompt; the load falls as 1/n with an even split)."""
    work = _work_per_prompt_token(replica, whole)
    rho = np.array([r * (1.0 + headroom) * m.mean_prompt * work
                    for r, m in zip(rates, mixes, strict=True)])
    count = np.array([r * o.seconds for r, o in zip(rates, window, strict=True)])
    order = np.argsort(-rho)
    top = int(np.searchsorted(np.cumsum(count[order]), (1.0 - QUANTILE) * count.sum()))
    return max(math.ceil(float(rho[order][min(top, rho.size - 1)]) / 0.9), 1)


def _search(fits: Callable[[int], bool], low: int, high: int, guess: int) -> int:
    """Smallest n in [low, high] with fits(n) (monotone), galloping out from `guess` so a
    steady service costs two or three evaluations; `high` when none fits."""
    n = min(max(guess, low), high)
    step = 1
    if fits(n):
        hi, lo = n, low - 1  # fits(hi); lo fails, or is below the floor
        while hi > low:
            cand = max(hi - step, low)
            if not fits(cand):
                lo = cand
                break
            hi, step = cand, step * 2
    else:
        lo, hi = n, high + 1  # lo fails; hi fits, or is past the ceiling
        while lo < high:
            cand = min(lo + step, high)
            if fits(cand):
                hi = cand
                break
            lo, step = cand, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return min(hi, high)


def plan(replica: Replica, window: Sequence[Observation], autoscaling: Autoscaling, *,
         current: int, history: Sequence[tuple[float, int]] = (),
         startup_s: float | None = None, headroom: float = HEADROOM,
         backlog_s: float = 0.0) -> Decision:
    """Replicas and per-chip cap for a service whose requests of `window` (consecutive
    intervals, oldest first) were served by `current` replicas; `history` is the last
    decision's, `startup_s` a replica's start-up time (the replica model's by default),
    `headroom` the load added to the forecast and `backlog_s` the prefill work queued over
    the service now (seconds of one replica's work: its engines' waiting requests)."""
    if not window:
        raise ValueError("the planner needs at least one observed interval")
    a, obj = autoscaling, autoscaling.objective
    end = window[-1].start_s + window[-1].seconds
    horizon = replica.startup_s if startup_s is None else startup_s
    seen = [o for o in window if o.requests > 0 and o.mix is not None]
    if not seen:
        rec, attained, rates, mixes, slope = a.min_replicas, 1.0, [0.0] * len(window), [], 0.0
    else:
        whole = _merged(tuple(o.mix for o in seen if o.mix), tuple(o.requests for o in seen))
        mixes = [o.mix if o.mix is not None else whole for o in window]
        rates, slope = _forecast(window, horizon)
        if backlog_s > 0:  # the queue found drains within one start-up time
            drain = backlog_s / (_work_per_prompt_token(replica, whole) * whole.mean_prompt)
            rates = [r + drain / horizon for r in rates]
        cache: dict[int, tuple[bool, float]] = {}

        def sized(n: int) -> tuple[bool, float]:
            if n not in cache:
                load = [(o.seconds, r * (1.0 + headroom) / n)
                        for o, r in zip(window, rates, strict=True)]
                cache[n] = meets(replica, load, mixes, obj)
            return cache[n]

        guess = _guess(replica, window, rates, mixes, whole, headroom)
        rec = _search(lambda n: sized(n)[0], max(a.min_replicas, 1), a.max_replicas, guess)
        attained = sized(rec)[1]
    kept = (*((t, r) for t, r in history if t > end - a.scale_down_delay_s), (end, rec))
    desired = min(max(max(r for _, r in kept), a.min_replicas), a.max_replicas)
    # the replicas that will serve: a scale-down takes effect at once, a scale-up only later
    serving = min(current, desired)
    cap = (_cap(replica, window, [r * (1.0 + headroom) for r in rates], mixes, obj, serving)
           if seen and serving > 0 else None)
    seconds = sum(o.seconds for o in window)
    forecast = sum(o.seconds * r for o, r in zip(window, rates, strict=True)) / seconds
    return Decision(
        replicas=desired, cap_watts=cap, forecast_rate=forecast * (1.0 + headroom),
        attainment=attained, history=kept,
        reason=_reason(window, a, desired, rec, attained, slope, horizon, headroom, cap, current))


def _cap(replica: Replica, window: Sequence[Observation], rates: Sequence[float],
         mixes: Sequence[TokenMix], obj: Objective, serving: int) -> float | None:
    """The lowest cap on the ladder at which `serving` replicas meet both objectives on the
    forecast the replicas were sized for (`rates`, headroom included); None when only the
    uncapped chip does."""
    load = [(o.seconds, r / serving) for o, r in zip(window, rates, strict=True)]
    power = replica.power
    steps = math.ceil((power.peak - power.cap_min) / CAP_STEP_W)
    ladder = [power.cap_min + CAP_STEP_W * k for k in range(steps)]  # all below the peak
    if not ladder or not meets(replica, load, mixes, obj, ladder[-1])[0]:
        return None
    lo, hi = -1, len(ladder) - 1  # ladder[hi] meets; ladder[lo] fails (or is below it)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(replica, load, mixes, obj, ladder[mid])[0] else (mid, hi)
    return ladder[hi]


def _reason(window: Sequence[Observation], a: Autoscaling, desired: int, rec: int,
            attained: float, slope: float, horizon: float, headroom: float, cap: float | None,
            current: int) -> str:
    """One sentence for `status` (the replica count, what sized it, and the cap)."""
    obj = a.objective
    minutes = sum(o.seconds for o in window) / 60.0
    peak = max(o.rate for o in window)
    if peak == 0:
        return f"{desired} replicas (minReplicas): no requests in the last {minutes:.0f} min"
    count = f"{desired} replica{'s' if desired != 1 else ''}"
    if desired > rec:
        count += (f", held for the scale-down delay ({desired} recommended within the last "
                  f"{a.scale_down_delay_s:.0f} s; {rec} now suffice)")
    elif desired == a.max_replicas and attained < QUANTILE:
        count += " (maxReplicas, too few)"
    trend = f", rising {slope * 60:,.0f} req/s a minute" if slope > 0 else ""
    capping = (f"; chips capped at {cap:.0f} W, enough on the {min(current, desired)} serving"
               if cap is not None else "; chips uncapped")
    return (f"{count}: the last {minutes:.0f} min (peak {peak:,.0f} req/s{trend}) moved "
            f"{horizon:.0f} s ahead plus {headroom:.0%} headroom keeps {attained:.1%} of "
            f"requests within p99 TTFT {obj.ttft_ms:.0f} ms and TPOT {obj.tpot_ms:.0f} ms at "
            f"{rec}{capping}")
