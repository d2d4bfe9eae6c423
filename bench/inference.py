"""Benchmark: an inference service that follows real request load, beside a training trace.

The shared Azure LLM code trace (Azure/AzurePublicDataset 2023, `AzureLLMInferenceTrace_code`;
Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA
2024) at rateScale 300 (a mean of about 770 requests/s, peak minutes over 3,000), looped for
24 h, served by Llama-3-70B replicas of 16 chips in FP8 to p99 TTFT <= 1,000 ms and TPOT <= 50
ms (minReplicas 1, maxReplicas 72, scale-down delay 300 s, priority 100), on 8 Trn3 Gen2
UltraServers shared with the training jobs of the ITP trace cluster04 (one trace GPU = 4
chips, priority 0, preemptible). The same run replays the three scaling policies
(`ultraplane simulate --inference`): `ultraplane` (the core's planner), `static-peak` (sized
for the peak minute) and `hpa` (the Kubernetes HPA on replica utilization, target 70%).
Each replay stops when the service ends; `training_useful_chip_hours` is the training work
kept over those 24 hours.

Targets: slo_attainment >= 0.99; tokens per kWh >= 1.5x static-peak and >= 1.2x hpa at equal
or better attainment; training chip-hours >= 1.3x static-peak; scale_up_wait_p99_s <= the
replica start-up + 60 s; 0 needless splits; the three replays <= 120 s.

    python bench/inference.py [--trace TRAINING.csv] [--requests REQUESTS.csv]
                              [--rate-scale K] [--duration S] [--fleet PROFILE:N]

Ends with ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from ultraplane.simulator.inferenceruns import (
    inference_summary,
    replay_services,
    service_window,
)
from ultraplane.simulator.replay import ReplayConfig
from ultraplane.simulator.reports import summarize
from ultraplane.simulator.servicefiles import ServiceSpec
from ultraplane.simulator.traces import load_trace

from ultraplane.hardware.topology import build_fleet

# the shared reference traces beside the checkout (a worktree may sit one level deeper)
SHARED = next((p / "shared/reference/traces" for p in Path(__file__).resolve().parents
               if (p / "shared/reference/traces").is_dir()),
              Path(__file__).resolve().parents[1].parent / "shared/reference/traces")
TRAINING = SHARED / "ms-itp-2021/cluster04.csv"
REQUESTS = SHARED / "inference/azure-llm-2023-code.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path,
                    default=Path(os.environ.get("ULTRAPLANE_TRAINING_TRACE", TRAINING)))
    ap.add_argument("--requests", type=Path,
                    default=Path(os.environ.get("ULTRAPLANE_REQUEST_TRACE", REQUESTS)))
    ap.add_argument("--rate-scale", type=float, default=300.0)
    ap.add_argument("--duration", type=int, default=86_400)
    ap.add_argument("--fleet", default="trn3-gen2:8")
    ap.add_argument("--chips-per-gpu", type=int, default=4)
    args = ap.parse_args()
    profile, _, count = args.fleet.partition(":")
    topology = build_fleet(profile, int(count))
    jobs, bad = load_trace(args.trace)
    if bad.total:
        raise SystemExit(f"{args.trace}: {bad.total} bad row(s), e.g. {bad[0]}")
    jobs.sort(key=lambda j: j.submit_s)
    spec = ServiceSpec.model_validate({
        "name": "code", "model": "llama-3-70b", "chipsPerReplica": 16, "precision": "FP8",
        "priority": 100, "durationSeconds": args.duration,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 72, "scaleDownDelaySeconds": 300,
                        "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}},
        "requests": {"trace": str(args.requests), "rateScale": args.rate_scale, "loop": True},
    })
    started = time.perf_counter()
    results = replay_services(topology, jobs, [spec],
                              ReplayConfig(chips_per_gpu=args.chips_per_gpu), stop_at_end=True)
    took = time.perf_counter() - started
    t0 = min((j.submit_s for j in jobs), default=0.0)
    figures = inference_summary(results, *service_window(t0, [spec]))
    code: dict[str, dict[str, Any]] = figures["inference"]["code"]
    chips: dict[str, float] = figures["training_useful_chip_hours"]
    splits = 0
    for r in results:
        s = summarize(r)
        splits += int(s["split_jobs_that_fit_one_ultraserver"]) + r.inference_splits
    print(f"{'policy':<12} {'attain':>8} {'TTFT p99':>10} {'TPOT p99':>9} {'tok/kWh':>9} "
          f"{'kWh':>8} {'rep-h':>7} {'train ch-h':>10} {'wait p99':>9}")
    for policy, f in code.items():
        wait = f["scale_up_wait_p99_s"]
        print(f"{policy:<12} {f['slo_attainment']:>8.4f} {f['ttft_p99_ms']:>10,.0f} "
              f"{f['tpot_p99_ms']:>9,.1f} {f['output_tokens_per_kwh']:>9,.0f} "
              f"{f['energy_kwh']:>8,.0f} {f['replica_hours']:>7,.0f} {chips[policy]:>10,.0f} "
              f"{'-' if wait is None else f'{wait:,.0f} s':>9}")
    ours, peak, hpa = code["ultraplane"], code["static-peak"], code["hpa"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    line = {
        "slo_attainment": round(ours["slo_attainment"], 4),
        "tokens_per_kwh_vs_static_peak": ratio(ours["output_tokens_per_kwh"],
                                               peak["output_tokens_per_kwh"]),
        "tokens_per_kwh_vs_hpa": ratio(ours["output_tokens_per_kwh"],
                                       hpa["output_tokens_per_kwh"]),
        "hpa_slo_attainment": round(hpa["slo_attainment"], 4),
        "static_peak_slo_attainment": round(peak["slo_attainment"], 4),
        "training_chip_hours_vs_static_peak": ratio(chips["ultraplane"], chips["static-peak"]),
        "training_chip_hours_vs_hpa": ratio(chips["ultraplane"], chips["hpa"]),
        "scale_up_wait_p99_s": (None if ours["scale_up_wait_p99_s"] is None
                                else round(ours["scale_up_wait_p99_s"], 2)),
        "replica_startup_s": round(ours["replica_startup_s"], 2),
        "split_jobs_that_fit_one_domain": splits,
        "ttft_p99_ms": round(ours["ttft_p99_ms"], 1),
        "tpot_p99_ms": round(ours["tpot_p99_ms"], 2),
        "replica_hours": {p: round(f["replica_hours"], 1) for p, f in code.items()},
        "requests": int(ours["requests"]),
        "replay_seconds": round(took, 1),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
