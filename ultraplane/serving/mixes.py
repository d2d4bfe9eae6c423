"""What a window of requests looks like: its token mix, and what a cluster observes per interval.

Why quantile summaries and not the requests: the planner runs every tick and the replay for
every service over a day, so a window must cost a fixed, small size whatever its traffic. A
`TokenMix` keeps 64 weighted quantile points of the prompt lengths and 64 of the output lengths,
denser in the upper tail (the p99 of a latency is made by the longest prompts), and treats the
two as independent. An `Observation` is one interval as a serving engine's metrics report it:
how many requests arrived and their mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Observation", "TokenMix", "merge_mixes"]

Floats = npt.NDArray[np.float64]

# Quantile bins: 32 over the body, 16 over p90-p99, 16 over the top percent.
_EDGES = np.unique(np.concatenate([
    np.linspace(0.0, 0.9, 33), np.linspace(0.9, 0.99, 17), np.linspace(0.99, 1.0, 17)]))
_LEVELS = (_EDGES[:-1] + _EDGES[1:]) / 2.0
_WEIGHTS = np.diff(_EDGES)


def _summary(values: Floats, weights: Floats | None = None) -> Floats:
    """Values at the bins' middle quantiles (weighted when `weights` is given)."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    w = np.ones_like(v) if weights is None else weights[order]
    cum = (np.cumsum(w) - w / 2.0) / w.sum()
    return np.asarray(np.interp(_LEVELS, cum, v), dtype=np.float64)


@dataclass(frozen=True, eq=False)
class TokenMix:
    """Prompt and output token lengths of a window, as weighted quantile points."""

    prompts: Floats  # 64 points, ascending
    outputs: Floats
    weights: Floats  # each point's share, summing to 1 (the same for both)

    @classmethod
    def from_samples(cls, prompts: Sequence[float] | Floats,
                     outputs: Sequence[float] | Floats) -> TokenMix:
        """Summarise observed requests (at least one of each)."""
        p = np.asarray(prompts, dtype=np.float64)
        o = np.asarray(outputs, dtype=np.float64)
        if p.size == 0 or o.size == 0:
            raise ValueError("a token mix needs at least one prompt and one output length")
        if p.min() < 1 or o.min() < 1:
            raise ValueError("token lengths must be at least 1")
        return cls(_summary(p), _summary(o), _WEIGHTS.copy())

    @classmethod
    def fixed(cls, prompt: float, output: float) -> TokenMix:
        """Every request alike (a spec that gives one shape, not a trace)."""
        return cls.from_samples([prompt], [output])

    @classmethod
    def levels(cls) -> Floats:
        """The quantile levels the points stand at (for a mix read off a histogram)."""
        return np.array(_LEVELS, dtype=np.float64)

    @classmethod
    def from_points(cls, prompts: Sequence[float], outputs: Sequence[float]) -> TokenMix:
        """A mix whose points, at `levels()`, are given (ascending, as many as the levels)."""
        p, o = np.sort(np.asarray(prompts, np.float64)), np.sort(np.asarray(outputs, np.float64))
        if p.size != _LEVELS.size or o.size != _LEVELS.size:
            raise ValueError(f"a mix has {_LEVELS.size} points")
        return cls(p, o, _WEIGHTS.copy())

    def scaled(self, mean_prompt: float, mean_output: float) -> TokenMix:
        """The same shape with these means (lengths stay at least 1)."""
        p = self.prompts * (mean_prompt / max(self.mean_prompt, 1e-12))
        o = self.outputs * (mean_output / max(float(self.weights @ self.outputs), 1e-12))
        return TokenMix(np.maximum(p, 1.0), np.maximum(o, 1.0), self.weights.copy())

    @property
    def mean_prompt(self) -> float:
        return float(self.weights @ self.prompts)


def merge_mixes(mixes: Sequence[TokenMix], requests: Sequence[float]) -> TokenMix:
    """One mix for several intervals, each weighted by its number of requests."""
    share = np.asarray(requests, dtype=np.float64)
    if len(mixes) != len(share) or not mixes or share.sum() <= 0:
        raise ValueError("merging needs as many positive request counts as mixes")
    w = np.concatenate([m.weights * s for m, s in zip(mixes, share, strict=True)])
    prompts = np.concatenate([m.prompts for m in mixes])
    outputs = np.concatenate([m.outputs for m in mixes])
    return TokenMix(_summary(prompts, w), _summary(outputs, w), _WEIGHTS.copy())


@dataclass(frozen=True)
class Observation:
    """One interval of a service's traffic, as its engines' metrics report it."""

    start_s: float
    seconds: float
    requests: int
    mix: TokenMix | None = None  # None when no request arrived

    @property
    def rate(self) -> float:
        """Arrivals per second over the interval."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0
