"""Trainium hardware profiles, shipped as YAML data and loaded into frozen pydantic models.

Why data and not code: the figures change with every AWS announcement and several of them are
assumptions (chip power, Gen2 rack count, all of Trainium4). Keeping them in YAML next to their
source lets a reviewer check each number against its citation, and the loader refuses a figure
that has neither a `source` nor `assumption: true`. Aggregates (UltraServer TFLOPS, HBM,
bandwidth) are computed from the per-chip figures, never typed in, so tests can check them
against the published totals.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ChipSpec",
    "Figure",
    "Precision",
    "Profile",
    "ServingFigures",
    "UnknownProfileError",
    "load_profile",
    "profile_names",
]


class Precision(StrEnum):
    """Numeric precision the job computes in; picks the chip's TFLOPS figure."""

    MXFP4 = "MXFP4"
    MXFP8 = "MXFP8"
    FP8 = "FP8"
    BF16 = "BF16"
    FP16 = "FP16"
    TF32 = "TF32"
    FP32 = "FP32"


class UnknownProfileError(ValueError):
    """Raised for a profile name that is not shipped; the message lists the known ones."""


class Figure(BaseModel):
    """Where one number comes from: a public source, or a named assumption."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    value: float
    source: str | None = None
    assumption: bool = False
    note: str | None = None

    @model_validator(mode="after")
    def _cited(self) -> Figure:
        if not self.source and not self.assumption:
            raise ValueError("every figure needs a 'source' or 'assumption: true'")
        return self


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ChipSpec(BaseModel):
    """One accelerator chip. `tflops` are dense figures; precisions it lacks are absent."""

    model_config = _FROZEN
    name: str
    tflops: dict[Precision, float]
    hbm_gib: float
    hbm_tbps: float
    neuron_cores: int
    peak_watts: float
    idle_watts: float
    # Power states and capping (`ultraplane.hardware.powermodels`); every shipped profile states them
    # as assumptions. Defaults: no low-power state saving, no capping range.
    standby_watts: float | None = None
    wake_seconds: float = 0.0
    cap_min_watts: float | None = None
    cap_perf_exponent: float = 0.4
    # A job's restart on new chips (pods started, runtime up, checkpoint loaded): what a move
    # costs besides the lost work (`ultraplane.scheduling.moves`).
    restart_seconds: float = 60.0
    figures: dict[str, Figure] = Field(default_factory=dict, repr=False)


class ServingFigures(BaseModel):
    """How an LLM serving engine uses this chip: the figures of `ultraplane.serving`'s replica
    model that no public source gives (every shipped profile marks each one `assumption: true`
    and says why; docs/simulator.md lists them). The defaults are the shipped values, so a
    profile without a `serving` block still serves."""

    model_config = _FROZEN
    # shares of dense peak FLOPs a prefill chunk's and decode tokens' matmuls get
    prefill_mfu: float = Field(default=0.5, gt=0, le=1)
    decode_mfu: float = Field(default=0.5, gt=0, le=1)
    hbm_efficiency: float = Field(default=0.8, gt=0, le=1)  # share of HBM bandwidth streamed
    memory_bound_activity: float = Field(default=0.6, ge=0, le=1)  # power while streaming HBM
    step_overhead_ms: float = Field(default=2.0, ge=0)  # fixed cost of one engine iteration
    chunk_tokens: int = Field(default=2048, gt=0)  # token budget of one iteration
    max_sequences: int = Field(default=256, gt=0)  # sequences an engine runs at once
    memory_utilization: float = Field(default=0.9, gt=0, le=1)  # HBM for weights + KV cache
    kv_bytes_per_value: float = Field(default=2.0, gt=0)  # one cached K or V element
    weight_load_gbytes_per_s: float = Field(default=5.0, gt=0)  # storage -> HBM, per replica
    startup_overhead_s: float = Field(default=60.0, ge=0)  # pod, runtime, graphs, warm-up


class Profile(BaseModel):
    """One UltraServer generation: its layout, its chip and its fabric."""

    model_config = _FROZEN
    name: str
    display_name: str
    projected: bool
    prefix: str
    chip: ChipSpec
    servers_per_ultraserver: int = Field(gt=0)
    chips_per_server: int = Field(gt=0, le=64)
    racks_per_ultraserver: int = Field(gt=0)
    fabric: str = ""
    # Per chip, in gigabytes per second, keyed by the level the traffic crosses.
    bandwidth_gbps: dict[str, float]
    # EFA per UltraServer, in gigabits per second (AWS quotes it that way).
    efa_gbps: float
    serving: ServingFigures = ServingFigures()
    figures: dict[str, Figure] = Field(default_factory=dict, repr=False)

    @property
    def chips_per_ultraserver(self) -> int:
        return self.servers_per_ultraserver * self.chips_per_server

    @property
    def servers_per_rack(self) -> int:
        """Servers per rack, rounded up (the last rack may be short)."""
        return -(-self.servers_per_ultraserver // self.racks_per_ultraserver)

    @property
    def chips_per_rack(self) -> int:
        return self.servers_per_rack * self.chips_per_server

    @property
    def assumptions(self) -> list[str]:
        """Dotted names of every figure that is an assumption, for reports and docs."""
        found = [k for k, f in self.figures.items() if f.assumption]
        found += [f"chip.{k}" for k, f in self.chip.figures.items() if f.assumption]
        return sorted(found)

    def ultraserver_tflops(self, precision: Precision | str) -> float:
        """Dense TFLOPS of a whole UltraServer; 0 when the chip lacks the precision."""
        per_chip = self.chip.tflops.get(Precision(precision), 0.0)
        return round(per_chip * self.chips_per_ultraserver, 6)

    def ultraserver_hbm_gib(self) -> float:
        return round(self.chip.hbm_gib * self.chips_per_ultraserver, 6)

    def ultraserver_hbm_tbps(self) -> float:
        return round(self.chip.hbm_tbps * self.chips_per_ultraserver, 6)

    def ultraserver_peak_watts(self) -> float:
        return self.chip.peak_watts * self.chips_per_ultraserver


def _unwrap(raw: Any, path: str, figures: dict[str, Figure]) -> Any:
    """Replace `{value, source|assumption}` leaves by their value, recording the provenance."""
    if isinstance(raw, dict):
        if "value" in raw:
            figure = Figure.model_validate(raw)
            figures[path] = figure
            return int(figure.value) if float(figure.value).is_integer() else figure.value
        return {k: _unwrap(v, f"{path}.{k}" if path else str(k), figures) for k, v in raw.items()}
    return raw


def _parse(raw: dict[str, Any]) -> Profile:
    chip_raw = raw.pop("chip")
    chip_figures: dict[str, Figure] = {}
    chip = ChipSpec.model_validate({**_unwrap(chip_raw, "", chip_figures), "figures": chip_figures})
    figures: dict[str, Figure] = {}
    return Profile.model_validate({**_unwrap(raw, "", figures), "chip": chip, "figures": figures})


@cache
def _catalogue() -> dict[str, Profile]:
    found: dict[str, Profile] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            profile = _parse(yaml.safe_load(entry.read_text(encoding="utf-8")))
            found[profile.name] = profile
    return found


def profile_names() -> list[str]:
    """Names of the shipped profiles, sorted."""
    return sorted(_catalogue())


def load_profile(name: str) -> Profile:
    """The profile called `name`; raises UnknownProfileError listing the known names."""
    try:
        return _catalogue()[name]
    except KeyError:
        known = ", ".join(profile_names())
        raise UnknownProfileError(f"unknown profile {name!r}; known profiles: {known}") from None
