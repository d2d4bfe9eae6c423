"""The performance and power models, on hand-built chips (no profile data needed).

The fidelity figures against the shipped profiles live in test_sim_fidelity.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ultraplane.simulator.models import (
    Assumptions,
    Hardware,
    inference,
    spread_slowdown,
    training_step,
)

# A Gen2-like chip: 4 chips/server, 144 chips/UltraServer, figures from trainium.md.
GEN2 = Hardware(
    name="gen2-like", tflops={"MXFP8": 2517.0, "BF16": 671.0}, hbm_gib=144.0, hbm_tbps=4.9,
    peak_watts=1000.0, idle_watts=200.0, chips_per_server=4, chips_per_ultraserver=144,
    level_gbytes_per_s={"server": 256.0, "rack": 320.0, "ultraserver": 128.0},
    efa_gbps_per_ultraserver=28_800.0, chips_per_rack=72,
)


@pytest.mark.parametrize(
    ("utilization", "precision", "watts"),
    [(0.0, "MXFP8", 200.0), (1.0, "MXFP8", 1000.0), (0.5, "MXFP8", 600.0),
     (1.0, "BF16", 200.0 + 800.0 * 0.95), (7.0, "MXFP8", 1000.0)],
)
def test_chip_power_is_idle_plus_dynamic(utilization: float, precision: str, watts: float) -> None:
    assert GEN2.chip_power(utilization, precision, Assumptions()) == pytest.approx(watts)


def test_bottleneck_bandwidth_by_spread() -> None:
    # +- server (256) -+- rack (320) -+- between racks (128) -+- EFA 28.8 Tb/s / 144 chips
    assert GEN2.bottleneck_gbytes_per_s("server") == 256.0
    assert GEN2.bottleneck_gbytes_per_s("rack") == 256.0
    assert GEN2.bottleneck_gbytes_per_s("ultraserver") == 128.0
    assert GEN2.bottleneck_gbytes_per_s("network-1") == pytest.approx(25.0)
    assert GEN2.bottleneck_gbytes_per_s("cluster") == pytest.approx(25.0)


def test_training_step_is_six_n_t_at_mfu_when_alone() -> None:
    step = training_step(GEN2, params_b=7, tokens_per_step=1e6, precision="BF16", chips=1, level="server")
    assert step.seconds == pytest.approx(6 * 7e9 * 1e6 / (671e12 * 0.40))
    assert step.comm_s == 0.0


@pytest.mark.parametrize("chips", [16, 64, 144])
def test_spread_slows_training(chips: int) -> None:
    """server <= rack <= UltraServer < across UltraServers over EFA."""
    steps = [
        training_step(GEN2, params_b=70, tokens_per_step=3e4, precision="BF16", chips=chips, level=lvl).seconds
        for lvl in ("server", "rack", "ultraserver", "network-1")
    ]
    assert steps == sorted(steps) and steps[-1] > steps[0]


def test_trace_slowdown_monotone_and_one_for_single_chip() -> None:
    assert spread_slowdown(GEN2, "network-1", 1) == 1.0
    s = [spread_slowdown(GEN2, lvl, 8) for lvl in ("server", "rack", "ultraserver", "network-2")]
    assert s[0] == 1.0 and s == sorted(s) and s[2] > 1.0 and s[-1] > 1.5


def test_training_rejects_unsupported_precision() -> None:
    with pytest.raises(ValueError, match="FP32 is not supported"):
        training_step(GEN2, params_b=1, tokens_per_step=1, precision="FP32", chips=1, level="server")


def test_decode_is_memory_bound_at_batch_one() -> None:
    # 70B in MXFP8 on 16 chips: 70 GB of weights over 16 x 4.9 TB/s x 0.8
    r = inference(GEN2, params_b=70, precision="MXFP8", chips=16, tpot_slo_ms=1e9,
                  a=dataclasses.replace(Assumptions(), max_batch=1))
    assert r.batch == 1
    assert r.tpot_s == pytest.approx((70e9 + 4700 * 70 * 4096 / 2) / (16 * 4.9e12 * 0.8))
    assert r.tokens_per_s == pytest.approx(1 / r.tpot_s)


def test_latency_slo_caps_the_batch() -> None:
    loose = inference(GEN2, params_b=70, precision="MXFP8", chips=16, tpot_slo_ms=200)
    tight = inference(GEN2, params_b=70, precision="MXFP8", chips=16, tpot_slo_ms=3)
    assert tight.batch < loose.batch and tight.tpot_s * 1e3 <= 3 and tight.slo_met
    impossible = inference(GEN2, params_b=70, precision="MXFP8", chips=16, tpot_slo_ms=0.1)
    assert not impossible.slo_met


def test_model_that_does_not_fit_in_hbm_misses_slo() -> None:
    r = inference(GEN2, params_b=2000, precision="BF16", chips=4)
    assert not r.slo_met


@given(st.floats(0, 1), st.floats(0, 1))
def test_power_monotone_in_utilization(u1: float, u2: float) -> None:
    a = Assumptions()
    lo, hi = sorted((u1, u2))
    assert GEN2.idle_watts <= GEN2.chip_power(lo, "MXFP8", a) <= GEN2.chip_power(hi, "MXFP8", a) <= GEN2.peak_watts
