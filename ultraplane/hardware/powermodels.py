"""The chip power model: what a Trainium chip draws, asleep, idle, busy and capped.

Why in the core: the scheduler admits jobs against power budgets by *predicting* their draw,
and the simulator *charges* energy for the same jobs. If the two used different formulas the
budgets would be enforced against numbers the replay never measures. So the one model lives
here, pure, and `simulator/models.py` calls it.

Per chip: `idle + (peak - idle) x utilisation x precision factor` (busy), `idle` (powered and
unused), `standby` (its UltraServer powered down). A power cap `c` limits a chip to `c` watts
(within `[cap_min, peak]`); a job whose uncapped draw is above the cap runs at
`((c - idle) / (draw - idle)) ** cap_perf_exponent` of its speed. Every figure that is not
published is a profile field marked `assumption: true` in `ultraplane/hardware/profiles/*.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ultraplane.hardware.profiles import load_profile

__all__ = ["DEFAULT_POWER_FACTOR", "ChipPower", "chip_power_of", "chip_watts"]

# Assumption: low precision matmuls draw the full dynamic power; wider formats keep the engines
# slightly less busy per FLOP. No public source gives this.
DEFAULT_POWER_FACTOR: dict[str, float] = {
    "MXFP4": 1.0, "MXFP8": 1.0, "FP8": 1.0, "BF16": 0.95, "FP16": 0.95, "TF32": 0.9, "FP32": 0.85,
}


def chip_watts(idle: float, peak: float, utilization: float, factor: float = 1.0) -> float:
    """Watts of one busy chip: idle + (peak - idle) x utilisation (clamped to 0..1) x factor."""
    u = min(max(utilization, 0.0), 1.0)
    return idle + (peak - idle) * u * factor


@dataclass(frozen=True)
class ChipPower:
    """The power figures of one profile's chip, in watts per chip and seconds."""

    profile: str
    peak: float
    idle: float
    standby: float  # per chip while its UltraServer is powered down
    wake_s: float  # powered down -> schedulable
    cap_min: float  # the lowest cap the chip accepts
    cap_exponent: float

    def busy(self, utilization: float, precision: str = "BF16",
             factors: dict[str, float] | None = None) -> float:
        """Uncapped draw of a chip running at `utilization` in `precision`."""
        factor = (factors or DEFAULT_POWER_FACTOR).get(str(precision), 1.0)
        return chip_watts(self.idle, self.peak, utilization, factor)

    def clamp_cap(self, cap: float) -> float:
        """A cap kept in the chip's supported range [cap_min, peak]."""
        return min(max(cap, self.cap_min), self.peak)

    def speed(self, uncapped: float, cap: float | None) -> float:
        """Share of its uncapped speed a chip drawing `uncapped` watts keeps under `cap`
        (1.0 without a cap or when the cap is above its draw)."""
        if cap is None or cap >= uncapped or uncapped <= self.idle:
            return 1.0
        share = max(self.clamp_cap(cap) - self.idle, 0.0) / (uncapped - self.idle)
        return float(share ** self.cap_exponent)

    def capped(self, uncapped: float, cap: float | None) -> float:
        """What a chip drawing `uncapped` watts draws under `cap`."""
        return uncapped if cap is None else min(uncapped, self.clamp_cap(cap))

    @property
    def break_even_s(self) -> float:
        """Idle seconds after which powering an UltraServer down saves energy: the wake's
        energy over the saving rate, `wake_s + wake_s x (P_wake - idle) / (idle - standby)`
        (the break-even time of dynamic power management, Benini et al. 2000). Waking is taken
        to draw the idle power (the replay charges at least that), so it is the wake latency. A timeout equal
        to it never spends more than twice the energy of an oracle that knew each idle
        period's length (Karlin et al.'s ski-rental bound), whatever the arrivals: a
        default that needs no knowledge of the workload."""
        p_wake = self.idle
        if self.idle <= self.standby:
            return float("inf")  # powering down saves nothing
        return self.wake_s + self.wake_s * (p_wake - self.idle) / (self.idle - self.standby)


@cache
def chip_power_of(profile: str) -> ChipPower:
    """The power figures of a shipped profile (cached; profiles are immutable)."""
    chip = load_profile(profile).chip
    return ChipPower(
        profile=profile, peak=float(chip.peak_watts), idle=float(chip.idle_watts),
        standby=float(chip.standby_watts if chip.standby_watts is not None else chip.idle_watts),
        wake_s=float(chip.wake_seconds),
        cap_min=float(chip.cap_min_watts if chip.cap_min_watts is not None else chip.peak_watts),
        cap_exponent=float(chip.cap_perf_exponent))
