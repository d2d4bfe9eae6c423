"""summary.json's power keys and power.csv, from what a replay under budgets measured.

Why apart from `reports`: the power figures exist only when a replay ran with budgets or
power-down (`simulator/powerside.py`), and their definitions (what counts as idle, active or
capped energy, when a budget counts as exceeded) belong next to each other, in one place.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ultraplane.simulator.records import ReplayResult


def power_summary(r: ReplayResult, useful_chip_s: float) -> dict[str, Any]:
    """The issue's power keys. `energy_kwh_idle`: the floor (idle chips of powered
    UltraServers, standby of powered-down ones); `energy_kwh_active`: the rest, drawn by jobs;
    `energy_kwh_capped`: the part of it drawn by jobs while capped; `seconds_over_budget`: time
    any budget's measured draw was above its limit (`largest_excess_w`: the most it was)."""
    useful_h = useful_chip_s / 3600.0
    energy = r.energy_kwh
    f = r.power
    idle = energy if f is None else f.energy_idle_j / 3.6e6
    fleet = [w for n, w in f.budgets] if f is not None else []
    out: dict[str, Any] = {
        "power_budget_w": (fleet[0] if len(fleet) == 1 else fleet) if fleet else None,
        "seconds_over_budget": 0.0 if f is None else f.seconds_over_budget,
        "largest_excess_w": 0.0 if f is None else f.largest_excess_w,
        "energy_kwh_idle": idle,
        "energy_kwh_active": max(energy - idle, 0.0),
        "energy_kwh_capped": 0.0 if f is None else f.energy_capped_j / 3.6e6,
        "energy_per_useful_chip_hour_kwh": energy / useful_h if useful_h > 0 else None,
        "capped_chip_hours": 0.0 if f is None else f.capped_chip_s / 3600.0,
        "powered_down_ultraserver_hours": 0.0 if f is None else f.powered_down_us_s / 3600.0,
        "wakes": 0 if f is None else f.wakes,
        # trace replays carry no token counts; the in-process runtime reports them per job
        "tokens_per_megawatt": None,
    }
    if f is not None:  # powered-down UltraServers draw standby, not idle: the split says so
        out.update({"energy_idle_kwh": idle, "energy_busy_kwh": max(energy - idle, 0.0),
                    "energy_idle_share": idle / energy if energy > 0 else None})
    return out


def write_power_csv(path: Path, r: ReplayResult) -> None:
    """One row per change of draw: time, the fleet's draw, each budget's draw (watts)."""
    f = r.power
    if f is None:
        return
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "fleet_w", *(f"budget_{name}_w" for name, _ in f.budgets)])
        for t, fleet, budgets in f.rows:
            w.writerow([f"{t:.3f}", f"{fleet:.1f}", *(f"{b:.1f}" for b in budgets)])


def energy_plot(out: Path, results: Sequence[ReplayResult]) -> list[tuple[str, str]]:
    """energy.png: each policy's energy split into idle, active (uncapped) and capped, for
    runs under budgets or power-down; [(file, title)] or [] when no run had any."""
    runs = [r for r in results if r.power is not None]
    if not runs:
        return []
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.5 * len(runs)), dpi=110)
    for i, r in enumerate(runs):
        f = r.power
        assert f is not None
        idle = f.energy_idle_j / 3.6e9
        capped = f.energy_capped_j / 3.6e9
        active = max(r.energy_kwh / 1e3 - idle - capped, 0.0)
        left = 0.0
        for value, colour, label in ((idle, "#bbbbbb", "idle"), (active, "#2e86de", "active"),
                                     (capped, "#e67e22", "capped")):
            ax.barh(i, value, left=left, color=colour, label=label if i == 0 else None)
            left += value
    ax.set_yticks(range(len(runs)), [r.policy for r in runs])
    ax.set_xlabel("MWh")
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title("Energy: idle, active and capped", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / "energy.png")
    plt.close(fig)
    return [("energy.png", "Energy: idle, active and capped")]
