"""A service's observed load from its model servers' counters and histograms at two instants.

Why in the core and pure: the operator reads the same vLLM metrics either by scraping each
replica's endpoint or from a Prometheus server, and both must hand the planner the same
figures; so both readers only collect samples (per replica: its counters and cumulative
histogram buckets, with the instant they were taken) and this module does the maths once.

The rules, as Prometheus applies them:

- A counter's increase is `after - before`; a counter that went down was reset (the server
  restarted) and its increase is `after` (Prometheus' `increase()` does the same).
- A replica's rate is its increase over its own two instants; the service's rate is the sum
  of its replicas' rates. Only replicas sampled at both instants count: a replica that came or
  went inside the window has no rate yet (as `rate()` needs two samples).
- A quantile of a histogram interpolates linearly inside the bucket that holds it, the upper
  bound of the last finite bucket when it falls in +Inf (`histogram_quantile`).
- The token mix: the prompt and output length histograms read at the mix's quantile levels,
  then scaled so their means are the token counters' exact ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ultraplane.serving.mixes import Observation, TokenMix
from ultraplane.serving.planners import Objective

__all__ = ["Histogram", "Load", "ReplicaSample", "increase", "observe", "quantile",
           "share_within"]

Buckets = tuple[tuple[float, float], ...]  # (upper bound `le`, cumulative count), ascending


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative bucket counts (the last bound +Inf) and its sum."""

    buckets: Buckets
    sum: float = 0.0

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0


@dataclass(frozen=True)
class ReplicaSample:
    """One replica's vLLM metrics at one instant (seconds on any clock both instants share)."""

    t: float
    requests: float  # vllm:request_success_total
    prompt_tokens: float  # vllm:prompt_tokens_total
    output_tokens: float  # vllm:generation_tokens_total
    ttft: Histogram  # vllm:time_to_first_token_seconds
    tpot: Histogram  # vllm:time_per_output_token_seconds
    prompt_lengths: Histogram | None = None  # vllm:request_prompt_tokens
    output_lengths: Histogram | None = None  # vllm:request_generation_tokens
    running: float = 0.0  # vllm:num_requests_running (a gauge)
    waiting: float = 0.0  # vllm:num_requests_waiting


def increase(before: float, after: float) -> float:
    """A counter's increase between two samples; a reset counts from zero."""
    return after - before if after >= before else after


def _histogram_increase(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    if after is None:
        return None
    if before is None or [b for b, _ in before.buckets] != [b for b, _ in after.buckets]:
        return after if before is None else None  # re-bucketed: no comparable increase
    if any(a < b for (_, b), (_, a) in zip(before.buckets, after.buckets, strict=True)):
        return after  # reset
    return Histogram(tuple((le, a - b) for (le, b), (_, a)
                           in zip(before.buckets, after.buckets, strict=True)),
                     after.sum - before.sum)


def _add(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None or b is None:
        return b if a is None else a
    if [x for x, _ in a.buckets] != [x for x, _ in b.buckets]:
        raise ValueError("replicas export different histogram buckets")
    return Histogram(tuple((le, x + y) for (le, x), (_, y) in zip(a.buckets, b.buckets,
                                                                   strict=True)),
                     a.sum + b.sum)


def quantile(q: float, h: Histogram) -> float | None:
    """`histogram_quantile(q, h)`; None for an empty histogram."""
    total = h.count
    if total <= 0 or not h.buckets:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in h.buckets:
        if cum >= rank:
            if math.isinf(le):
                return lower  # the highest finite bound, as Prometheus answers
            width = cum - below
            return lower + (le - lower) * ((rank - below) / width if width > 0 else 1.0)
        lower, below = le, cum
    return lower


def share_within(h: Histogram, x: float) -> float | None:
    """Share of the observations at most `x` (linear inside a bucket); None when empty."""
    total = h.count
    if total <= 0:
        return None
    lower, below = 0.0, 0.0
    for le, cum in h.buckets:
        if x < le:
            if math.isinf(le):
                return below / total
            return (below + (cum - below) * max(x - lower, 0.0) / (le - lower)) / total
        lower, below = le, cum
    return 1.0


@dataclass(frozen=True)
class Load:
    """What a window of a service's requests looked like, as status.load says it."""

    start_s: float
    seconds: float
    requests_per_second: float
    prompt_tokens_per_request: float | None
    output_tokens_per_request: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    slo_attainment: float | None  # share of requests within both objectives
    mix: TokenMix | None
    replicas: int  # replicas sampled at both instants

    def observation(self) -> Observation:
        """The interval as the planner reads it."""
        return Observation(self.start_s, self.seconds,
                           round(self.requests_per_second * self.seconds), self.mix)

    def status(self) -> dict[str, float]:
        """status.load of an InferenceJob (unknown figures left out)."""
        fields = {"requestsPerSecond": self.requests_per_second,
                  "promptTokensPerRequest": self.prompt_tokens_per_request,
                  "outputTokensPerRequest": self.output_tokens_per_request,
                  "ttftP99Ms": self.ttft_p99_ms, "tpotP99Ms": self.tpot_p99_ms,
                  "sloAttainment": self.slo_attainment}
        return {k: round(v, 4) for k, v in fields.items() if v is not None}


def _mix(prompts: Histogram | None, outputs: Histogram | None, mean_prompt: float,
         mean_output: float) -> TokenMix:
    """The window's mix from its length histograms, or every request at the means."""
    if prompts is None or outputs is None or prompts.count <= 0 or outputs.count <= 0:
        return TokenMix.fixed(max(mean_prompt, 1.0), max(mean_output, 1.0))

    def at(h: Histogram) -> Sequence[float]:
        return [max(quantile(float(q), h) or 1.0, 1.0) for q in TokenMix.levels()]

    mix = TokenMix.from_points(at(prompts), at(outputs))
    return mix.scaled(mean_prompt, mean_output)


def observe(before: Mapping[str, ReplicaSample], after: Mapping[str, ReplicaSample],
            objective: Objective | None = None) -> Load | None:
    """The load between two sets of samples keyed by replica (pod); None when no replica
    was sampled at both instants."""
    both = [k for k in after if k in before and after[k].t > before[k].t]
    if not both:
        return None
    rate = prompt_rate = output_rate = 0.0
    ttft = tpot = plens = olens = None
    for k in both:
        b, a = before[k], after[k]
        dt = a.t - b.t
        rate += increase(b.requests, a.requests) / dt
        prompt_rate += increase(b.prompt_tokens, a.prompt_tokens) / dt
        output_rate += increase(b.output_tokens, a.output_tokens) / dt
        ttft = _add(ttft, _histogram_increase(b.ttft, a.ttft))
        tpot = _add(tpot, _histogram_increase(b.tpot, a.tpot))
        plens = _add(plens, _histogram_increase(b.prompt_lengths, a.prompt_lengths))
        olens = _add(olens, _histogram_increase(b.output_lengths, a.output_lengths))
    start = min(before[k].t for k in both)
    seconds = max(after[k].t for k in both) - start
    per_prompt = prompt_rate / rate if rate > 0 else None
    per_output = output_rate / rate if rate > 0 else None
    ttft_p99 = quantile(0.99, ttft) if ttft else None
    tpot_p99 = quantile(0.99, tpot) if tpot else None
    attained = None
    if objective is not None and ttft is not None and tpot is not None:
        a_ttft = share_within(ttft, objective.ttft_ms / 1e3)
        a_tpot = share_within(tpot, objective.tpot_ms / 1e3)
        if a_ttft is not None:
            attained = a_ttft * (a_tpot if a_tpot is not None else 1.0)
    mix = (_mix(plens, olens, per_prompt, per_output or 1.0)
           if per_prompt is not None and rate > 0 else None)
    return Load(start_s=start, seconds=seconds, requests_per_second=rate,
                prompt_tokens_per_request=per_prompt, output_tokens_per_request=per_output,
                ttft_p99_ms=ttft_p99 * 1e3 if ttft_p99 is not None else None,
                tpot_p99_ms=tpot_p99 * 1e3 if tpot_p99 is not None else None,
                slo_attainment=attained, mix=mix, replicas=len(both))
