"""Performance and power models of jobs on virtual Trainium chips.

Why a separate module: the discrete-event loop, the offline replay, the
in-process runtime and cluster mode all need the same answers ("how long is a
training step on these chips, spread like this?", "what does a chip draw at
this utilization?"). Keeping the arithmetic here, pure and parameterised,
means every number in a report can be traced to one formula and one named
assumption in `Assumptions`, which `docs/simulator.md` lists.

Hardware figures come from the core hardware profiles (`hardware_from_profile`);
nothing the public sources do not state is hidden in code: it is a field of
`Assumptions` with a default that callers may override.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ultraplane.hardware.powermodels import DEFAULT_POWER_FACTOR, chip_watts
from ultraplane.scheduling.predictions import stretch

#: Levels in the order a job's spread gets worse (nearest first).
INTRA_LEVELS = ("server", "rack", "ultraserver")

_DEFAULT_BYTES_PER_PARAM = {
    "MXFP4": 0.5, "MXFP8": 1.0, "FP8": 1.0, "BF16": 2.0, "FP16": 2.0, "TF32": 4.0, "FP32": 4.0,
}
# (the chip power model and its precision factors live in the core, `ultraplane.hardware.powermodels`,
# so the scheduler predicts draw with the formula the simulator charges)
_DEFAULT_POWER_FACTOR = DEFAULT_POWER_FACTOR


@dataclass(frozen=True)
class Assumptions:
    """Every figure no public source states, named so a study can override it."""

    mfu: float = 0.40  # training model-FLOPs utilisation at ideal placement
    prefill_mfu: float = 0.50  # inference prefill FLOPs utilisation
    decode_mfu: float = 0.50  # FLOPs utilisation when decode is compute bound
    hbm_efficiency: float = 0.80  # fraction of HBM bandwidth decode achieves
    grad_bytes_per_param: float = 2.0  # gradients exchanged in BF16
    comm_overlap: float = 0.80  # share of gradient traffic hidden behind compute
    trace_comm_fraction: float = 0.10  # share of a trace job's step that is communication
    busy_utilization: float = 0.90  # utilisation of a chip running a trace job
    memory_bound_activity: float = 0.60  # power activity of a chip streaming HBM
    checkpoint_cost_s: float = 30.0  # time to write one checkpoint
    restart_cost_s: float = 60.0  # time to reload a checkpoint after a restart
    kv_bytes_per_token_per_bparam: float = 4_700.0  # KV cache (BF16) per context token
    context_tokens: int = 4_096  # context length held per sequence
    prompt_tokens: int = 1_024  # prompt length of a request (prefill)
    max_batch: int = 512  # largest decode batch per replica
    bytes_per_param: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_BYTES_PER_PARAM))
    power_factor: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_POWER_FACTOR))


DEFAULT_ASSUMPTIONS = Assumptions()


@dataclass(frozen=True)
class Hardware:
    """Per-chip figures of one profile, in plain units the formulas use."""

    name: str
    tflops: dict[str, float]  # dense TFLOPS by precision name
    hbm_gib: float
    hbm_tbps: float
    peak_watts: float
    idle_watts: float
    chips_per_server: int
    chips_per_ultraserver: int
    level_gbytes_per_s: dict[str, float]  # per-chip bandwidth: server / rack / ultraserver
    efa_gbps_per_ultraserver: float
    chips_per_rack: int = 0  # 0: the profile does not split UltraServers into racks

    def peak_tflops(self, precision: str) -> float:
        """Dense TFLOPS at `precision`; a precision the chip lacks is a clear error."""
        try:
            return self.tflops[str(precision)]
        except KeyError:
            known = ", ".join(sorted(self.tflops))
            raise ValueError(
                f"precision {precision} is not supported by {self.name} (supported: {known})"
            ) from None

    def ideal_level(self, chips: int) -> str:
        """Tightest level a gang of `chips` could fit in on an empty fleet."""
        if chips <= self.chips_per_server:
            return "server"
        if self.chips_per_rack and chips <= self.chips_per_rack:
            return "rack"
        return "ultraserver" if chips <= self.chips_per_ultraserver else "network-1"

    def efa_gbytes_per_s_per_chip(self) -> float:
        return self.efa_gbps_per_ultraserver / 8.0 / self.chips_per_ultraserver

    def bottleneck_gbytes_per_s(self, level: str) -> float:
        """Slowest per-chip link a job spread up to `level` must cross."""
        path: list[float] = []
        for lvl in INTRA_LEVELS:
            if lvl in self.level_gbytes_per_s:
                path.append(self.level_gbytes_per_s[lvl])
            if lvl == level:
                return min(path) if path else self.efa_gbytes_per_s_per_chip()
        path.append(self.efa_gbytes_per_s_per_chip())
        return min(path)

    def chip_power(self, utilization: float, precision: str, a: Assumptions) -> float:
        """Watts: idle + (peak - idle) x utilisation x precision factor (the core's
        `ultraplane.hardware.powermodels.chip_watts`, which the scheduler's budgets predict with)."""
        return chip_watts(self.idle_watts, self.peak_watts, utilization,
                          a.power_factor.get(str(precision), 1.0))


def hardware_from_profile(profile: Any) -> Hardware:
    """Flatten a core `Profile` into the figures the models use."""
    chip = profile.chip
    bw = {str(k): float(v) for k, v in dict(profile.bandwidth_gbps).items()}
    return Hardware(
        name=str(profile.name),
        tflops={str(k): float(v) for k, v in dict(chip.tflops).items()},
        hbm_gib=float(chip.hbm_gib),
        hbm_tbps=float(chip.hbm_tbps),
        peak_watts=float(chip.peak_watts),
        idle_watts=float(chip.idle_watts),
        chips_per_server=int(profile.chips_per_server),
        chips_per_ultraserver=int(profile.chips_per_ultraserver),
        level_gbytes_per_s=bw,
        efa_gbps_per_ultraserver=float(profile.efa_gbps),
        chips_per_rack=int(profile.chips_per_ultraserver) // max(int(profile.racks_per_ultraserver), 1),
    )


@dataclass(frozen=True)
class TrainingStep:
    seconds: float
    compute_s: float
    comm_s: float
    utilization: float  # share of the step the chips compute


def training_step(
    hw: Hardware, *, params_b: float, tokens_per_step: float, precision: str, chips: int,
    level: str, a: Assumptions = DEFAULT_ASSUMPTIONS,
) -> TrainingStep:
    """Step time: 6 x params x tokens FLOPs at MFU, plus exposed gradient traffic.

    The gradient all-reduce moves ~2 x gradient bytes per chip whatever the
    chip count (ring), at the slowest link the spread crosses; only the share
    not overlapped with compute slows the step.
    """
    if chips <= 0 or params_b <= 0 or tokens_per_step <= 0:
        raise ValueError("chips, model parameters and tokens per step must be positive")
    flops = 6.0 * params_b * 1e9 * tokens_per_step
    compute = flops / (chips * hw.peak_tflops(precision) * 1e12 * a.mfu)
    comm = 0.0
    if chips > 1:
        grad_bytes = params_b * 1e9 * a.grad_bytes_per_param
        comm = 2.0 * (chips - 1) / chips * grad_bytes / (hw.bottleneck_gbytes_per_s(level) * 1e9)
    exposed = max(0.0, comm - a.comm_overlap * compute) if comm else 0.0
    seconds = compute + exposed
    return TrainingStep(seconds, compute, comm, a.busy_utilization * compute / seconds)


def spread_slowdown(hw: Hardware, level: str, chips: int, a: Assumptions = DEFAULT_ASSUMPTIONS) -> float:
    """Factor (>= 1) a trace job's duration grows by when spread up to `level`.

    Trace jobs carry a duration, not a model. We assume the trace's duration
    was measured at the tightest placement the job's size allows, and that
    `trace_comm_fraction` of it is communication, which stretches with the
    bottleneck bandwidth of the actual spread.
    """
    if chips <= 1:
        return 1.0
    ref = hw.bottleneck_gbytes_per_s(hw.ideal_level(chips))
    # The formula is the core's (the scheduler predicts split slowdowns with it).
    return stretch(ref, hw.bottleneck_gbytes_per_s(level), a.trace_comm_fraction)


@dataclass(frozen=True)
class Inference:
    batch: int
    tpot_s: float  # time per output token
    ttft_s: float  # time to first token (prefill of one prompt)
    tokens_per_s: float  # per replica
    utilization: float
    watts: float  # per replica
    slo_met: bool

    @property
    def tokens_per_megawatt(self) -> float:
        """Output tokens per second per megawatt drawn (tokens/s/MW)."""
        return self.tokens_per_s / (self.watts / 1e6) if self.watts else 0.0


def inference(
    hw: Hardware, *, params_b: float, precision: str, chips: int, tpot_slo_ms: float | None = None,
    ttft_slo_ms: float | None = None, active_params_b: float | None = None,
    a: Assumptions = DEFAULT_ASSUMPTIONS,
) -> Inference:
    """Largest decode batch that meets the per-token latency SLO, and what it yields.

    Decode reads all weights plus the batch's KV cache from HBM for every token
    (memory bound) or does 2 x active params FLOPs per token (compute bound),
    whichever is slower; prefill is compute bound. Batch is capped by the HBM
    left after the weights.
    """
    active = active_params_b if active_params_b is not None else params_b
    bpp = a.bytes_per_param.get(str(precision), 2.0)
    weights = params_b * 1e9 * bpp
    kv_per_seq = a.kv_bytes_per_token_per_bparam * params_b * a.context_tokens * min(bpp, 2.0) / 2.0
    hbm_bytes = hw.hbm_gib * 2**30 * chips
    bw = hw.hbm_tbps * 1e12 * chips * a.hbm_efficiency
    flops = hw.peak_tflops(precision) * 1e12 * chips
    max_fit = math.floor((hbm_bytes - weights) / kv_per_seq) if hbm_bytes > weights else 0
    ttft = 2.0 * active * 1e9 * a.prompt_tokens / (flops * a.prefill_mfu)

    def tpot(b: int) -> tuple[float, float, float]:
        mem = (weights + b * kv_per_seq) / bw
        comp = 2.0 * active * 1e9 * b / (flops * a.decode_mfu)
        return max(mem, comp), mem, comp

    best = 1
    for b in range(1, min(a.max_batch, max(max_fit, 1)) + 1):
        if tpot_slo_ms is not None and tpot(b)[0] * 1e3 > tpot_slo_ms:
            break
        best = b
    t, mem, comp = tpot(best)
    util = max(comp, mem * a.memory_bound_activity) / t
    watts = chips * hw.chip_power(util, precision, a)
    slo = max_fit >= 1 and (tpot_slo_ms is None or t * 1e3 <= tpot_slo_ms) and (
        ttft_slo_ms is None or ttft * 1e3 <= ttft_slo_ms
    )
    return Inference(best, t, ttft, best / t, util, watts, slo)
