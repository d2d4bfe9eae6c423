"""One service in a replay: its replicas, its load window by window, and what they served.

Why windows through the fluid model: a service's requests are never simulated one by one.
Every window (`requestwindows`) is priced by the core's closed form of one replica
(`ultraplane.serving.estimates.estimate`) at the window's arrival rate split evenly over the
replicas serving, the per-chip cap in force and the backlog the last window left; a window
whose load outruns its replicas leaves a backlog, and its requests miss by the model. A
replica serves only from its start-up time after it was placed (a share of a window when it
comes up inside one). The estimates repeat (a looped trace, steady replica counts), so they
are cached by what they depend on.

What is counted, per service: requests, the share within both objectives (`slo_attainment`),
the day's p99 TTFT and TPOT (every window's distribution, weighted by its requests, on a
fixed grid), output tokens, the replicas' energy (serving draw; idle draw while starting or
without requests), replica-hours held, and the wait from a decision to scale up to the
replica serving.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ultraplane.simulator.requestwindows import Windows

from ultraplane.serving.estimates import Estimate, estimate
from ultraplane.serving.mixes import TokenMix
from ultraplane.serving.planners import Objective
from ultraplane.serving.replicas import Replica

__all__ = ["TPOT_GRID_S", "TTFT_GRID_S", "ServiceFigures", "WindowLoad", "evaluate"]

TTFT_GRID_S = np.logspace(-2.0, 3.0, 41)  # 10 ms .. 1,000 s
TPOT_GRID_S = np.logspace(-3.0, 0.0, 31)  # 1 ms .. 1 s


@dataclass(frozen=True)
class WindowLoad:
    """What one window's replicas did: per-replica figures of the fluid model."""

    attainment: float
    ttft_tail: np.ndarray  # share of requests above each TTFT_GRID_S point
    tpot_tail: np.ndarray
    watts: float  # one serving replica's mean draw
    utilization: float  # prefill-busy share of a serving replica (above 1: overloaded)
    backlog_s: float  # the fluid backlog per replica it leaves


_CACHE: dict[tuple[int, int, float, float | None, float], WindowLoad] = {}
_CACHE_MAX = 200_000


def evaluate(replica: Replica, mix: TokenMix, seconds: float, rate: float,
             cap: float | None, backlog_s: float, objective: Objective) -> WindowLoad:
    """One replica serving `rate` requests/s of `mix` for `seconds` under `cap`, from a
    backlog of `backlog_s` seconds of prefill work (cached: the same inputs price alike)."""
    key = (id(replica), id(mix), round(rate, 6), cap, round(seconds, 6)) if backlog_s <= 0 else None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    e: Estimate = estimate(replica, mix, [(seconds, rate)], cap, backlog_s=backlog_s)
    got = WindowLoad(e.attainment(objective.ttft_ms / 1e3, objective.tpot_ms / 1e3),
                     e.ttft_exceedances(TTFT_GRID_S), e.tpot_exceedances(TPOT_GRID_S),
                     e.watts, e.utilization, e.final_backlog_s)
    if key is not None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = got
    return got


def _p99(grid: np.ndarray, tail: np.ndarray, total: float) -> float | None:
    """The 99th percentile of a distribution given as request counts above `grid` points
    (log-linear between them); None without requests, the grid's top when it is beyond."""
    if total <= 0:
        return None
    share = tail / total
    above = np.nonzero(share > 0.01)[0]
    if above.size == 0:
        return float(grid[0])
    i = int(above[-1])
    if i + 1 >= grid.size:
        return float(grid[-1])
    a, b = share[i], share[i + 1]
    f = 0.0 if a == b else (np.log(a) - np.log(0.01)) / (np.log(a) - np.log(max(b, 1e-300)))
    return float(np.exp(np.log(grid[i]) + min(max(f, 0.0), 1.0)
                        * (np.log(grid[i + 1]) - np.log(grid[i]))))


@dataclass
class ServiceFigures:
    """What a service did over its run, and the series its plots draw."""

    requests: float = 0.0
    within: float = 0.0
    output_tokens: float = 0.0
    energy_j: float = 0.0
    replica_s: float = 0.0
    ttft_tail: np.ndarray = field(default_factory=lambda: np.zeros(TTFT_GRID_S.size))
    tpot_tail: np.ndarray = field(default_factory=lambda: np.zeros(TPOT_GRID_S.size))
    waits_s: list[float] = field(default_factory=list)
    # series, one point per window: (end, offered req/s, replicas serving, replicas held,
    # p99 TTFT of the window's requests in ms (None without), service draw in W)
    t: list[float] = field(default_factory=list)
    offered: list[float] = field(default_factory=list)
    serving: list[float] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    ttft_p99_ms: list[float | None] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)

    def add(self, t: float, requests: float, mean_output: float, load: WindowLoad | None,
            serving: float, held: int, watts: float, seconds: float) -> None:
        """One window: `load` None when nothing served its requests (all missed)."""
        self.requests += requests
        self.output_tokens += requests * mean_output
        self.energy_j += watts * seconds
        self.replica_s += held * seconds
        p99: float | None = None
        if requests > 0:
            if load is None:
                self.ttft_tail += requests
                self.tpot_tail += requests
                p99 = float(TTFT_GRID_S[-1]) * 1e3
            else:
                self.within += requests * load.attainment
                self.ttft_tail += requests * load.ttft_tail
                self.tpot_tail += requests * load.tpot_tail
                got = _p99(TTFT_GRID_S, load.ttft_tail, 1.0)
                p99 = None if got is None else got * 1e3
        self.t.append(t)
        self.offered.append(requests / seconds)
        self.serving.append(serving)
        self.held.append(held)
        self.ttft_p99_ms.append(p99)
        self.power_w.append(watts)

    def summary(self, startup_s: float) -> dict[str, float | None]:
        """The keys of summary.json's `inference` block for one service and policy."""
        kwh = self.energy_j / 3.6e6
        ttft = _p99(TTFT_GRID_S, self.ttft_tail, self.requests)
        tpot = _p99(TPOT_GRID_S, self.tpot_tail, self.requests)
        return {
            "requests": self.requests,
            "slo_attainment": self.within / self.requests if self.requests else None,
            "ttft_p99_ms": None if ttft is None else ttft * 1e3,
            "tpot_p99_ms": None if tpot is None else tpot * 1e3,
            "output_tokens": self.output_tokens,
            "energy_kwh": kwh,
            "output_tokens_per_kwh": self.output_tokens / kwh if kwh > 0 else None,
            "replica_hours": self.replica_s / 3600.0,
            "scale_up_wait_p99_s": (float(np.percentile(self.waits_s, 99))
                                    if self.waits_s else None),
            "scale_ups": len(self.waits_s),
            "replica_startup_s": startup_s,
        }


def windows_mix(windows: Windows, i: int) -> TokenMix | None:
    """Window `i`'s token mix (None: no request)."""
    k = int(windows.mix_index[i])
    return windows.mixes[k] if k >= 0 else None
