"""How long a request waits for the prefill queue, when the load changes from one interval to
the next.

Why not a stationary queue per interval: a burst of ten seconds at 90% load leaves the queue
far from its steady state (whose relaxation time is then several seconds), and a burst above
100% leaves a backlog the next interval inherits. So the prefill queue's work is a reflected
Brownian motion through the intervals (Harrison, Brownian Motion and Stochastic Flow Systems,
1985, 1.8): in an interval of load `rho` it drifts at `rho - 1` from the backlog it inherited
(the fluid's, `V' = max(0, V + (rho - 1) dt)`), and an arrival at time `t` into it waits

    P(W > z) = k [ Phi(-(z - x0 - m t) / s) + e^(2 m z / v) Phi(-(z + x0 + m t) / s) ]

with `m = rho - 1`, `s = sqrt(v t)`. Its variance rate `v` is chosen so that the stationary
tail is M/G/1's Cramer-Lundberg one, `C e^(-R z)` with `lam (E[e^(R S)] - 1) = R` and
`C = (1 - rho) / (lam E[S e^(R S)] - 1)` (Asmussen, Applied Probability and Queues, XIII.5):
`v = 2 (1 - rho) / R`, and `k = C` once any inherited backlog has drained (1 before), the
whole never above M/G/1's `P(W > 0) = rho` then. Below
100% load and long after a change this is exactly the M/G/1 tail; at and above it, the
Brownian motion's own variance `lam E[S^2]`. Each interval is sampled at four Gauss-Legendre
instants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ultraplane.serving.mixes import Floats

__all__ = ["CRITICAL", "WaitClasses", "erfc", "lundberg", "wait_classes"]

_NODES = 0.5 + 0.5 * np.array([-0.8611363116, -0.3399810436, 0.3399810436, 0.8611363116])
_NODE_W = 0.5 * np.array([0.3478548451, 0.6521451549, 0.6521451549, 0.3478548451])
CRITICAL = 0.999  # above this load the Brownian motion's own variance is used


def erfc(z: Floats) -> Floats:
    """Complementary error function (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7)."""
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                                                       + t * (-1.453152027 + t * 1.061405429))))
    r = poly * np.exp(-a * a)
    return np.asarray(np.where(z >= 0, r, 2.0 - r), dtype=np.float64)


def _log_ncdf(b: Floats) -> Floats:
    """log Phi(b), its asymptotic series far in the lower tail (where Phi underflows)."""
    far = np.minimum(b, -6.0)
    series = -far * far / 2.0 - np.log(-far) - 0.9189385332 + np.log1p(-1.0 / (far * far))
    near = np.log(np.maximum(0.5 * erfc(-np.maximum(b, -6.0) / np.sqrt(2.0)), 1e-300))
    return np.where(b < -6.0, series, near)


def lundberg(lam: Floats, service: Floats, w: Floats) -> tuple[Floats, Floats]:
    """Decay `R` and constant `C` of each row's M/G/1 wait tail (`lam`, and `service` times
    with their weights `w`, per row; loads at or above 100% are taken just below)."""
    es = (service * w).sum(axis=1)
    rho = np.minimum(lam * es, CRITICAL)
    lam = np.maximum(rho / es, 1e-9)  # an interval without arrivals: any tail, never used
    # Newton on h(R) = log E[e^(R S)] - log(1 + R / lam), the same root: h is convex
    # (a cumulant generating function less a concave log), so steps from the heavy-traffic
    # root, which lies at or right of the true one, fall monotonically onto it, and taking logs
    # makes it nearly linear where e^(R S) is steep. A root past 40 / max(S) is a tail gone
    # within the longest request's own service: such rows keep that bound (an overestimate
    # of the wait).
    top = service.max(axis=1)
    bound = 40.0 / top
    r = np.minimum(2.0 * (1.0 - rho) / np.maximum(lam * (service * service * w).sum(axis=1),
                                                  1e-300), bound)
    for _ in range(20):
        e = w * np.exp(r[:, None] * (service - top[:, None]))  # scaled by e^(-R max S)
        m = e.sum(axis=1)
        h = np.log(m) + r * top - np.log1p(r / lam)
        dh = (service * e).sum(axis=1) / m - 1.0 / (lam + r)
        step = np.where((h > 0) & (dh > 1e-12), h / np.maximum(dh, 1e-12), 0.0)
        r = r - step
        if np.all(step <= 1e-6 * r):
            break
    slope = lam * (service * np.exp(r[:, None] * service) * w).sum(axis=1) - 1.0
    # where the bound holds R, P(W > 0) = rho stands in for C (the M/G/1 atom's complement)
    c = np.where(slope > 1e-12, (1.0 - rho) / np.maximum(slope, 1e-12), rho)
    c = np.minimum(c, 1.0)
    return r, c


@dataclass(frozen=True, eq=False)
class WaitClasses:
    """Arrivals grouped by interval and instant; each class's wait is one Brownian law."""

    interval: npt.NDArray[np.intp]  # index of the class's interval
    share: Floats  # of all arrivals
    t: Floats  # seconds into the interval
    start: Floats  # backlog inherited at the interval's start
    drift: Floats  # rho - 1
    variance: Floats  # per second
    scale: Floats  # k
    ceiling: Floats  # P(W > 0): rho once drained below 100% load (M/G/1), 1 otherwise
    fluid: Floats  # the fluid backlog at t (0 once drained)

    def tail(self, z: Floats) -> Floats:
        """P(W > z) per class; `z` has the classes on its first axis."""
        shape = (-1,) + (1,) * (np.ndim(z) - 1)
        t, x0, m, v, k, top = (a.reshape(shape) for a in (self.t, self.start, self.drift,
                                                          self.variance, self.scale, self.ceiling))
        zz = np.maximum(z, 0.0)
        s = np.sqrt(v * t)
        above = 0.5 * erfc((zz - x0 - m * t) / s / np.sqrt(2.0))
        reflected = np.exp(np.minimum(2.0 * m * zz / v + _log_ncdf(-(zz + x0 + m * t) / s), 0.0))
        return np.where(z < 0, 1.0, np.minimum(k * (above + reflected), top))


def wait_classes(secs: Floats, lam: Floats, rho: Floats, service: Floats, w: Floats,
                 backlog_s: float) -> tuple[WaitClasses, float]:
    """The classes of a load's arrivals, and the fluid backlog it leaves behind."""
    n = secs.size
    edges = np.empty(n + 1)
    edges[0] = max(backlog_s, 0.0)
    for i in range(n):  # Lindley's recursion on the fluid work
        edges[i + 1] = max(edges[i] + (rho[i] - 1.0) * secs[i], 0.0)
    r, c = lundberg(lam, service, w)
    under = rho < CRITICAL
    variance = np.where(under, 2.0 * (1.0 - np.minimum(rho, CRITICAL)) / r,
                        lam * (service * service * w).sum(axis=1))
    variance = np.maximum(variance, 1e-12)
    idx = np.repeat(np.arange(n), _NODES.size)
    t = np.tile(_NODES, n) * secs[idx]
    x0, m = edges[idx], rho[idx] - 1.0
    fluid = np.maximum(x0 + m * t, 0.0)
    drained = (x0 == 0) | (fluid == 0)
    fresh = under[idx] & drained
    scale = np.where(fresh, c[idx], 1.0)
    ceiling = np.where(fresh, np.minimum(rho[idx], 1.0), 1.0)
    share = lam[idx] * secs[idx] * np.tile(_NODE_W, n)
    total = share.sum()
    share = share / total if total > 0 else np.full(idx.size, 1.0 / idx.size)
    classes = WaitClasses(idx, share, t, x0, m, variance[idx], scale, ceiling, fluid)
    return classes, float(edges[-1])
