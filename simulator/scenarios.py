"""The documented Trn3 vs Trn2 scenario: output tokens per megawatt at the same latency.

Why a module and not a notebook: docs/simulator.md quotes these figures, and a
test recomputes them, so the page cannot drift from the model. Run
`python -m ultraplane.simulator.scenarios` to print the table.

Scenario constants (all assumptions, all overridable): a dense 70B-parameter
model, one replica on 16 chips of one UltraServer, decoding with a 4,096-token
context per sequence, a per-output-token latency SLO of 25 ms (40 tokens
per second per user) and prefill of a 1,024-token prompt under 1 s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ultraplane.simulator.fleets import hardware
from ultraplane.simulator.models import DEFAULT_ASSUMPTIONS, Assumptions, inference

MODEL_PARAMS_B = 70.0
CHIPS_PER_REPLICA = 16
TPOT_SLO_MS = 25.0
# The latency SLO, not an arbitrary cap, must bound the batch for "at the same latency".
SCENARIO = dataclasses.replace(DEFAULT_ASSUMPTIONS, max_batch=16_384)
TTFT_SLO_MS = 1000.0
CASES = (  # (label, Trn2 precision, Trn3 precision)
    ("same precision (FP8 on both)", "FP8", "MXFP8"),
    ("each at its lowest precision (Trn2 FP8, Trn3 MXFP4)", "FP8", "MXFP4"),
)


def tokens_per_megawatt(profile: str, precision: str, *, peak_watts: float | None = None,
                        a: Assumptions = SCENARIO, params_b: float = MODEL_PARAMS_B,
                        chips: int = CHIPS_PER_REPLICA, tpot_slo_ms: float = TPOT_SLO_MS) -> dict[str, Any]:
    hw = hardware(profile)
    if peak_watts is not None:
        hw = dataclasses.replace(hw, peak_watts=peak_watts, idle_watts=0.3 * peak_watts)
    r = inference(hw, params_b=params_b, precision=precision, chips=chips, tpot_slo_ms=tpot_slo_ms,
                  ttft_slo_ms=TTFT_SLO_MS, a=a)
    return {"profile": profile, "precision": precision, "batch": r.batch, "tpot_ms": r.tpot_s * 1e3,
            "ttft_ms": r.ttft_s * 1e3, "tokens_per_s": r.tokens_per_s, "watts": r.watts,
            "tokens_per_megawatt": r.tokens_per_megawatt, "slo_met": r.slo_met}


def trn3_vs_trn2(*, trn3_peak_watts: float | None = None,
                 a: Assumptions = SCENARIO) -> list[dict[str, Any]]:
    """One row per case: both sides and the Trn3/Trn2 tokens-per-megawatt ratio."""
    rows = []
    for label, p2, p3 in CASES:
        t2 = tokens_per_megawatt("trn2", p2, a=a)
        t3 = tokens_per_megawatt("trn3-gen2", p3, peak_watts=trn3_peak_watts, a=a)
        rows.append({"case": label, "trn2": t2, "trn3": t3,
                     "ratio": t3["tokens_per_megawatt"] / t2["tokens_per_megawatt"]})
    return rows


def main() -> None:
    for peak in (None, 700.0, 1200.0):
        tag = "profile power" if peak is None else f"Trn3 peak {peak:.0f} W"
        for row in trn3_vs_trn2(trn3_peak_watts=peak):
            t2, t3 = row["trn2"], row["trn3"]
            print(f"[{tag}] {row['case']}: Trn2 batch {t2['batch']} {t2['tpot_ms']:.1f} ms/token "
                  f"{t2['tokens_per_megawatt']:,.0f} tok/s/MW | Trn3 batch {t3['batch']} "
                  f"{t3['tpot_ms']:.1f} ms/token {t3['tokens_per_megawatt']:,.0f} tok/s/MW | "
                  f"ratio {row['ratio']:.2f}x")


if __name__ == "__main__":
    main()
