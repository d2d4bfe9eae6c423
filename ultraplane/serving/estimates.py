"""The closed-form model of one replica under a request load: queueing, TTFT, TPOT and draw.

Why closed form: the planner asks it a dozen times a tick and the replay once a tick for every
service over a day, so it must cost well under a millisecond and nothing per request. It is a
fluid and queueing approximation of the engine `engines` simulates step by step (the fidelity
test holds the two within 15% at p99 on the shared Azure trace):

- Prefill is the server. A request's prefill work is `S = p t_lin + p^2/2 t_att` seconds (its
  prompt's tokens at the per-token cost of a full chunked-prefill step, and their attention),
  plus, with the probability the replica was not prefilling, the fixed cost of a step it
  starts alone; an interval of arrival rate `lam` keeps the replica prefilling `rho = lam E[S]`
  of its time. Decode tokens ride in the same steps (vLLM V1, Sarathi-Serve) and take `d` of
  each step's budget, `d = lam E[output - 1] x mean step` by Little's law.
- Queueing (`waits`): a fluid backlog carries overload from one interval to the next; within
  one, a reflected Brownian motion from the inherited backlog whose stationary tail is M/G/1's
  Cramer-Lundberg one, `P(W > x) ~ C e^(-R x)` (Asmussen, Applied Probability and Queues, XIII.5).
- TTFT = backlog + wait + own prefill `S` + one step's fixed cost (the first chunk waits for
  the step in flight, the last ends with its step).
- TPOT: a decoding request's steps are full prefill steps (`T_f`) while the replica prefills
  and decode-only steps (`T_d`) otherwise, so its TPOT is `1 / (phi/T_f + (1 - phi)/T_d)` with
  `phi` the prefilling share of its decode window. `phi` is the time average of an on-off
  process (busy periods of mean `E[S]/(1 - rho)`, idle ones of mean `1/lam`) over the window,
  taken normal with that process's mean `rho` and variance
  `rho (1 - rho) 2 (x - 1 + e^-x) / x^2`, `x` the window over the process's correlation time.
- Draw: prefill steps' draw for `rho` of the time, decode steps' while a sequence decodes,
  idle otherwise; under a cap every step slows by the profile's perf-versus-cap curve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ultraplane.serving.mixes import Floats, TokenMix
from ultraplane.serving.replicas import Replica
from ultraplane.serving.waits import CRITICAL, WaitClasses, erfc, wait_classes

__all__ = ["Estimate", "Load", "estimate"]

#: A steady arrival rate (requests/s), or intervals of (seconds, requests/s) in time order.
Load = float | Sequence[tuple[float, float]]


@dataclass(frozen=True, eq=False)
class Estimate:
    """One replica's latency distributions and draw under a load. Arrays are per class of
    arrivals (`waits.WaitClasses`: an interval's instant) and, where two-dimensional, per
    point of that interval's token mix."""

    replica: Replica
    cap: float | None
    waits: WaitClasses
    own_s: Floats  # own prefill and one step's fixed cost, per prompt point
    prompt_w: Floats  # the prompt points' weights
    rho: Floats  # prefilling share of the replica's time
    full_step_s: Floats  # T_f
    decode_step_s: Floats  # T_d
    phi_sd: Floats  # spread of the prefilling share of a decode window, per output point
    tpot_w: Floats  # output points' weights among requests of 2+ tokens
    utilization: float  # mean prefilling share of the time (over 1: overloaded)
    watts: float  # mean draw of the replica over the load's duration
    decode_batch: float  # mean decoding sequences, request-weighted
    max_batch: float  # sequences the KV cache (or the engine) holds at once, request-weighted
    final_backlog_s: float  # the fluid backlog the load leaves behind

    def queueing_exceedance(self, x: float) -> float:
        """Share of requests that wait longer than `x` seconds before their prefill starts."""
        return float(self.waits.share @ self.waits.tail(np.full(self.rho.size, x)))

    def ttft_exceedance(self, x: float) -> float:
        """Share of requests whose time to first token exceeds `x` seconds."""
        tails = self.waits.tail(x - self.own_s)
        return float(self.waits.share @ (tails * self.prompt_w).sum(axis=1))

    def tpot_exceedance(self, y: float) -> float:
        """Share of requests (of 2+ output tokens) whose time per output token exceeds `y`."""
        tf, td = self.full_step_s[:, None], self.decode_step_s[:, None]
        gap = np.maximum(1.0 / td - 1.0 / tf, 1e-12)
        f = (1.0 / td - 1.0 / y) / gap  # the prefilling share that makes TPOT = y
        rho = np.minimum(self.rho, 1.0)[:, None]
        z = (f - rho) / np.maximum(self.phi_sd, 1e-12) / np.sqrt(2.0)
        p = np.where(self.phi_sd > 0, 0.5 * erfc(z), (rho > f).astype(np.float64))
        p = np.where(y >= tf, 0.0, np.where(y < td, 1.0, p))
        return float(self.waits.share @ (p * self.tpot_w).sum(axis=1))

    def ttft_exceedances(self, xs: Floats) -> Floats:
        """`ttft_exceedance` at every point of `xs` at once (a replay's day-long histogram)."""
        tails = self.waits.tail(xs[None, None, :] - self.own_s[:, :, None])
        return np.asarray(self.waits.share @ (tails * self.prompt_w[:, :, None]).sum(axis=1))

    def tpot_exceedances(self, ys: Floats) -> Floats:
        """`tpot_exceedance` at every point of `ys` at once."""
        tf, td = self.full_step_s[:, None, None], self.decode_step_s[:, None, None]
        y = ys[None, None, :]
        gap = np.maximum(1.0 / td - 1.0 / tf, 1e-12)
        f = (1.0 / td - 1.0 / y) / gap
        rho = np.minimum(self.rho, 1.0)[:, None, None]
        sd = self.phi_sd[:, :, None]
        z = (f - rho) / np.maximum(sd, 1e-12) / np.sqrt(2.0)
        p = np.where(sd > 0, 0.5 * erfc(z), (rho > f).astype(np.float64))
        p = np.where(y >= tf, 0.0, np.where(y < td, 1.0, p))
        return np.asarray(self.waits.share @ (p * self.tpot_w[:, :, None]).sum(axis=1))

    def attainment(self, ttft_s: float, tpot_s: float) -> float:
        """Share of requests within both objectives (the two misses taken as independent)."""
        return (1.0 - self.ttft_exceedance(ttft_s)) * (1.0 - self.tpot_exceedance(tpot_s))

    def ttft_quantile(self, q: float) -> float:
        return _quantile(self.ttft_exceedance, q, float(self.own_s.min()))

    def tpot_quantile(self, q: float) -> float:
        return _quantile(self.tpot_exceedance, q, float(self.decode_step_s.min()))

    def queueing_quantile(self, q: float) -> float:
        return _quantile(self.queueing_exceedance, q, 0.0)


def _quantile(exceedance: Callable[[float], float], q: float, low: float) -> float:
    """Smallest x with exceedance(x) <= 1 - q, by bisection to 0.1% (exceedance decreases)."""
    target = 1.0 - q
    lo, hi = max(low, 0.0), max(low, 1e-3) * 2.0
    while exceedance(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e7:
            return float("inf")
    if exceedance(lo) <= target:
        return lo
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if exceedance(mid) > target else (lo, mid)
    return hi


def _intervals(load: Load) -> tuple[Floats, Floats]:
    if isinstance(load, int | float):  # steady: one interval long enough to be stationary
        return np.array([3600.0]), np.array([float(load)])
    secs = np.array([float(s) for s, _ in load])
    rates = np.array([float(r) for _, r in load])
    if secs.size == 0 or np.any(secs <= 0) or np.any(rates < 0):
        raise ValueError("a load is one or more intervals of positive seconds and rates >= 0")
    return secs, rates


def estimate(replica: Replica, mix: TokenMix | Sequence[TokenMix], load: Load,
             cap: float | None = None, backlog_s: float = 0.0) -> Estimate:
    """One replica serving `load`, each chip capped at `cap` watts (None: uncapped).

    `mix` is the requests' token mix, one for all intervals or one per interval;
    `backlog_s` is prefill work already queued when the load starts."""
    secs, lam = _intervals(load)
    mixes = [mix] * secs.size if isinstance(mix, TokenMix) else list(mix)
    if len(mixes) != secs.size:
        raise ValueError(f"{len(mixes)} token mixes for {secs.size} intervals")
    m = _Mixes(np.stack([x.prompts for x in mixes]), np.stack([x.outputs for x in mixes]),
               np.stack([x.weights for x in mixes]))
    c = _price(replica, m, lam, cap)
    room = np.minimum(replica.figures.max_sequences,
                      replica.kv_capacity_tokens / (m.w * (m.p + m.out)).sum(axis=1))
    work, rho = _work(replica, m, c, lam, cap)
    bound = c.d > room * rho  # sequences, not compute, bind: stretch the work to match
    stretch = np.where(bound, c.d / room / np.maximum(rho, 1e-12), 1.0)
    work, rho = work * stretch[:, None], rho * stretch
    waits, final = wait_classes(secs, lam, rho, work, m.w, backlog_s)
    idx = waits.interval
    busy = np.minimum(rho, 1.0)
    # Draw: prefill steps, decode-only steps while a sequence decodes, idle otherwise.
    decoding = (1.0 - busy) * (1.0 - np.exp(-c.d))
    per_chip = busy * c.wf + decoding * c.wd + (1.0 - busy - decoding) * replica.power.idle
    arrivals = lam * secs
    per_request = max(float(arrivals.sum()), 1e-12)
    tpot_w = np.where(m.steps > 0, m.w, 0.0)
    return Estimate(
        replica=replica, cap=cap, waits=waits, own_s=(c.service + c.td[:, None])[idx],
        prompt_w=m.w[idx], rho=np.where(waits.fluid > 0, np.maximum(rho[idx], 1.0), rho[idx]),
        full_step_s=c.tf[idx], decode_step_s=c.td[idx],
        phi_sd=np.where(waits.fluid[:, None] > 0, 0.0,  # a backlog: every step prefills
                        _phi_spread(m, c, lam, rho, work)[idx]),
        tpot_w=(tpot_w / np.maximum(tpot_w.sum(axis=1, keepdims=True), 1e-12))[idx],
        utilization=float(rho @ secs) / float(secs.sum()),
        watts=float(per_chip @ secs) / float(secs.sum()) * replica.chips,
        decode_batch=float(c.d @ arrivals) / per_request,
        max_batch=float(room @ arrivals) / per_request if arrivals.sum() > 0 else float(room[0]),
        final_backlog_s=final)


@dataclass(frozen=True)
class _Mixes:
    """Every interval's mix as rows: prompt and output points and their weights."""

    p: Floats
    out: Floats
    w: Floats

    @property
    def steps(self) -> Floats:
        return np.maximum(self.out - 1.0, 0.0)  # decode steps of each output point


@dataclass(frozen=True)
class _Costs:
    """Per interval: full, attention-free and decode-only step seconds, the two draws, the
    per-token prefill costs, the decode batch, and each prompt point's fluid prefill work."""

    tf: Floats
    t0: Floats
    td: Floats
    wf: Floats
    wd: Floats
    tlin: Floats
    tatt: Floats
    d: Floats
    context: Floats  # tokens a decoding sequence holds, on average over its steps
    chunk: Floats
    service: Floats


def _price(replica: Replica, m: _Mixes, lam: Floats, cap: float | None) -> _Costs:
    """The steps of each interval at its decode batch (Little's law, once refined)."""
    f = replica.figures
    mean_p, mean_p2 = (m.w * m.p).sum(axis=1), (m.w * m.p * m.p).sum(axis=1)
    attended = mean_p2 / (2.0 * mean_p)  # mean context a prefill token reads
    mean_steps = (m.w * m.steps).sum(axis=1)
    context = mean_p + (m.w * m.steps * m.out).sum(axis=1) / 2.0 / np.maximum(mean_steps, 1e-12)
    n = lam.size
    zero = np.zeros(n)
    d = zero
    for _ in range(2):
        chunk = np.maximum(f.chunk_tokens - d, 1.0)
        one = np.maximum(d, 1.0)
        # a full step, the same without attention, and a decode-only step, priced at once
        seconds, watts = replica.steps(
            np.concatenate([chunk, chunk, zero]), np.concatenate([chunk * attended, zero, zero]),
            np.concatenate([d, d, one]), np.concatenate([d, d, one]) * np.tile(context, 3), cap)
        tf, t0, td = seconds[:n], seconds[n:2 * n], seconds[2 * n:]
        tlin, tatt = t0 / chunk, (tf - t0) / (chunk * attended)
        busy = np.minimum(lam * (tlin * mean_p + tatt * mean_p2 / 2.0), 1.0)
        d = lam * mean_steps / (busy / tf + (1.0 - busy) / td)
    service = m.p * tlin[:, None] + m.p * m.p / 2.0 * tatt[:, None]
    return _Costs(tf, t0, td, watts[:n], watts[2 * n:], tlin, tatt, d, context, chunk, service)


def _work(replica: Replica, m: _Mixes, c: _Costs, lam: Floats,
          cap: float | None) -> tuple[Floats, Floats]:
    """Each prompt point's prefill work and each interval's load. A prefill that finds no
    queue starts a step of its own, whose fixed cost (overhead, the decodes riding along, the
    weights' streaming floor) its tokens do not cover: that excess is paid with the
    probability the replica was not prefilling."""
    first = np.minimum(m.p, c.chunk[:, None])
    k = m.p.shape[1]
    alone, _ = replica.steps(first.ravel(), (first * first / 2.0).ravel(), np.repeat(c.d, k),
                             np.repeat(c.d * c.context, k), cap)
    excess = np.maximum(alone.reshape(m.p.shape) - first * c.tlin[:, None]
                        - first * first / 2.0 * c.tatt[:, None], 0.0)
    work = c.service
    for _ in range(2):
        rho = lam * (m.w * work).sum(axis=1)
        work = c.service + (1.0 - np.minimum(rho, 1.0))[:, None] * excess
    return work, lam * (m.w * work).sum(axis=1)


def _phi_spread(m: _Mixes, c: _Costs, lam: Floats, rho: Floats, work: Floats) -> Floats:
    """Per interval and output point, the spread of the prefilling share of a decode window:
    busy periods of prefill (M/G/1: mean E[S] / (1 - rho)) against idle ones (mean 1 / lam)
    make an on-off process, whose time average over a window of x correlation times has
    variance rho (1 - rho) 2 (x - 1 + e^-x) / x^2."""
    r = np.minimum(rho, CRITICAL)
    corr = 1.0 / ((1.0 - r) / (m.w * work).sum(axis=1) + np.maximum(lam, 1e-12))
    busy = np.minimum(rho, 1.0)
    mean_step = 1.0 / (busy / c.tf + (1.0 - busy) / c.td)
    x = np.maximum(m.steps * (mean_step / corr)[:, None], 1e-9)
    g = np.where(x < 1e-4, 1.0 - x / 3.0, 2.0 * (x - 1.0 + np.exp(-x)) / (x * x))
    return np.asarray(np.sqrt((r * (1.0 - r))[:, None] * g), dtype=np.float64)
