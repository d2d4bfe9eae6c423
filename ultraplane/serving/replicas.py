"""One inference replica: a language model on a few chips, and what one engine step costs it.

Why one step function: the closed-form model (`estimates`) and the request-level reference
(`engines`) must price work alike, or the fidelity test would compare two hardware models
instead of two queueing models. So both ask `Replica.step`, and nothing else here knows about
requests.

An engine step (one forward pass of continuous batching, Orca, OSDI 2022) runs every decoding
sequence one token and prefill chunks in what is left of the token budget (chunked prefill,
Sarathi-Serve, OSDI 2024). It takes

    overhead + max(compute, memory)
    compute = (2 P n_p + 4 L h A_p) / (F mfu_prefill) + (2 P n_d + 4 L h C_d) / (F mfu_decode)
    memory  = (weight bytes + KV bytes per token x C_d) / (HBM bandwidth x efficiency)

with P computing parameters, L layers, h the model dimension, n_p prefill tokens attending to
A_p tokens in all, n_d decoding sequences holding C_d context tokens, F the replica's dense
FLOP/s at its precision. Its power activity is `max(compute, memory_bound_activity x memory)`
over the step, the chip's draw the core's power model (`ultraplane.hardware.powermodels`), and
under a cap the step slows by that model's perf-versus-cap curve. Every figure not published
is the profile's `serving` block (assumptions, docs/simulator.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ultraplane.hardware.powermodels import ChipPower, chip_power_of
from ultraplane.hardware.profiles import ServingFigures, load_profile
from ultraplane.serving.llms import MODELS, LanguageModel

__all__ = ["Replica", "replica_for", "replica_of"]

Floats = npt.NDArray[np.float64]
Numbers = TypeVar("Numbers", float, Floats)


@dataclass(frozen=True)
class Replica:
    """A replica's fixed figures; build it with `replica_of` (cached)."""

    model: LanguageModel
    profile: str
    chips: int
    precision: str
    figures: ServingFigures
    power: ChipPower
    flops: float  # dense FLOP/s of all its chips at its precision
    hbm_bytes: float
    hbm_bytes_per_s: float  # achievable: bandwidth x efficiency

    @property
    def weight_bytes(self) -> float:
        return self.model.weight_bytes(self.precision)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.figures.kv_bytes_per_value)

    @property
    def kv_capacity_tokens(self) -> int:
        """Context tokens the KV cache holds: the engine's share of HBM after the weights."""
        free = self.hbm_bytes * self.figures.memory_utilization - self.weight_bytes
        return max(int(free // self.kv_bytes_per_token), 0)

    @property
    def startup_s(self) -> float:
        """Seconds from a replica's placement to serving: the fixed start, then the weights
        read from storage at the assumed bandwidth."""
        load = self.weight_bytes / (self.figures.weight_load_gbytes_per_s * 1e9)
        return self.figures.startup_overhead_s + load

    @property
    def idle_watts(self) -> float:
        """Draw of the whole replica between steps."""
        return self.power.idle * self.chips

    def step(self, prefill_tokens: float, prefill_attended: float, decodes: float,
             decode_context: float, cap: float | None = None) -> tuple[float, float]:
        """(seconds, watts per chip) of one engine step under a per-chip `cap` (None: none).

        `prefill_attended` is the sum over the prefill tokens of the context each attends to;
        `decode_context` the tokens the decoding sequences hold (their KV cache is read)."""
        compute, memory = self._demand(prefill_tokens, prefill_attended, decodes, decode_context)
        overhead = self.figures.step_overhead_ms / 1e3
        uncapped = overhead + max(float(compute), float(memory))
        activity = max(float(compute), self.figures.memory_bound_activity * float(memory)) / uncapped
        draw = self.power.busy(activity, self.precision)
        return uncapped / self.power.speed(draw, cap), self.power.capped(draw, cap)

    def steps(self, prefill_tokens: Floats, prefill_attended: Floats, decodes: Floats,
              decode_context: Floats, cap: float | None = None) -> tuple[Floats, Floats]:
        """`step` for arrays of steps at once (the closed form prices every interval)."""
        compute, memory = self._demand(prefill_tokens, prefill_attended, decodes, decode_context)
        uncapped = self.figures.step_overhead_ms / 1e3 + np.maximum(compute, memory)
        activity = np.maximum(compute, self.figures.memory_bound_activity * memory) / uncapped
        speed, watts = _power_curve(self.power, self.precision, cap)
        return uncapped / np.interp(activity, _ACTIVITY, speed), np.interp(activity, _ACTIVITY, watts)

    def _demand(self, prefill_tokens: Numbers, prefill_attended: Numbers, decodes: Numbers,
                decode_context: Numbers) -> tuple[Numbers, Numbers]:
        """Seconds of compute and of HBM traffic a step needs (before overhead and cap)."""
        f, m = self.figures, self.model
        compute = ((m.flops_per_token * prefill_tokens
                    + m.attention_flops_per_context_token * prefill_attended)
                   / (self.flops * f.prefill_mfu)
                   + (m.flops_per_token * decodes
                      + m.attention_flops_per_context_token * decode_context)
                   / (self.flops * f.decode_mfu))
        memory = (self.weight_bytes + self.kv_bytes_per_token * decode_context) / self.hbm_bytes_per_s
        return compute, memory


_ACTIVITY = np.linspace(0.0, 1.0, 201)


@cache
def _power_curve(power: ChipPower, precision: str, cap: float | None) -> tuple[Floats, Floats]:
    """The core power model's speed and capped draw at 201 activities from 0 to 1 (its curve
    is scalar and smooth: tabulated once per cap, read by interpolation, never copied)."""
    draws = [power.busy(float(a), precision) for a in _ACTIVITY]
    return (np.array([power.speed(d, cap) for d in draws]),
            np.array([power.capped(d, cap) for d in draws]))


@cache
def replica_of(model: LanguageModel, profile: str = "trn3-gen2", chips: int = 16,
               precision: str = "FP8") -> Replica:
    """`model` on `chips` chips of `profile` at `precision`. Raises ValueError when the chip
    lacks the precision or the weights leave no room for a KV cache."""
    if chips <= 0:
        raise ValueError("a replica needs at least one chip")
    p = load_profile(profile)
    tflops = {str(k): float(v) for k, v in p.chip.tflops.items()}
    if str(precision) not in tflops:
        raise ValueError(f"{p.chip.name} has no {precision} (it has {', '.join(sorted(tflops))})")
    replica = Replica(
        model=model, profile=profile, chips=chips, precision=str(precision), figures=p.serving,
        power=chip_power_of(profile), flops=chips * tflops[str(precision)] * 1e12,
        hbm_bytes=chips * float(p.chip.hbm_gib) * 2**30,
        hbm_bytes_per_s=chips * float(p.chip.hbm_tbps) * 1e12 * p.serving.hbm_efficiency)
    if replica.kv_capacity_tokens < 1:
        raise ValueError(f"{model.name} at {precision} leaves no HBM for a KV cache on "
                         f"{chips} chips of {profile}")
    return replica


def replica_for(model: str, *, chips: int, profile: str | None = None,
                parameters_b: float | None = None, precision: str = "FP8") -> Replica:
    """The replica an InferenceJob's spec describes: its model by catalogue name, else the
    catalogued model nearest its parameter count (else the 70B one), on its chips of its
    profile (trn3-gen2 when the job takes any)."""
    known = MODELS.get(model.lower())
    if known is None:
        size = parameters_b if parameters_b is not None else 70.0
        known = min(MODELS.values(), key=lambda m: abs(math.log(m.params_b / size)))
    return replica_of(known, profile or "trn3-gen2", chips, precision)
