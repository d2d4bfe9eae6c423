"""The serving model's inputs: the model catalogue, a replica's figures from the profile, one
engine step's cost and draw, the token-mix summaries, and the assumptions' bookkeeping."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ultraplane.hardware.powermodels import chip_power_of
from ultraplane.hardware.profiles import ServingFigures, load_profile, profile_names
from ultraplane.serving.llms import MODELS, LanguageModel, language_model
from ultraplane.serving.mixes import Observation, TokenMix, merge_mixes
from ultraplane.serving.replicas import replica_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"
LLAMA70 = language_model("llama-3-70b")


def test_llama_3_70b_holds_320_kib_of_kv_cache_per_token_in_bf16() -> None:
    # 2 (K and V) x 80 layers x 8 KV heads x 128 dims x 2 bytes (Llama 3 paper, Table 3)
    assert LLAMA70.kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert LLAMA70.weight_bytes("FP8") == pytest.approx(70.6e9)
    assert LLAMA70.weight_bytes("BF16") == pytest.approx(141.2e9)
    assert set(MODELS) == {"llama-3-8b", "llama-3-70b", "llama-3.1-405b"}


def test_unknown_names_list_what_is_known() -> None:
    with pytest.raises(ValueError, match="llama-3-8b"):
        language_model("gpt-5")
    with pytest.raises(ValueError, match="FP8"):
        LLAMA70.weight_bytes("INT3")
    with pytest.raises(ValueError, match="positive"):
        LanguageModel("broken", 1.0, 0, 4096, 8, 128)


def test_a_replica_takes_its_figures_from_the_profile() -> None:
    r = replica_of(LLAMA70, "trn3-gen2", 16, "FP8")
    chip = load_profile("trn3-gen2").chip
    assert r.flops == pytest.approx(16 * 2517e12)
    assert r.hbm_bytes == 16 * 144 * 2**30
    assert r.hbm_bytes_per_s == pytest.approx(16 * 4.9e12 * 0.8)
    assert r.power == chip_power_of("trn3-gen2") and r.idle_watts == 16 * chip.idle_watts
    # the KV cache is the engine's 90% of HBM after the weights: ~6.6M tokens of context
    assert r.kv_capacity_tokens == int((0.9 * r.hbm_bytes - 70.6e9) // 327_680)
    # start-up: 60 s of pod, runtime and graphs, then 70.6 GB from storage at 5 GB/s
    assert r.startup_s == pytest.approx(60 + 70.6 / 5)


def test_a_replica_the_chip_cannot_serve_is_refused() -> None:
    with pytest.raises(ValueError, match="no MXFP8"):
        replica_of(LLAMA70, "trn2", 16, "MXFP8")
    with pytest.raises(ValueError, match="no HBM for a KV cache"):
        replica_of(language_model("llama-3.1-405b"), "trn2", 2, "BF16")


def test_a_decode_step_streams_the_weights_and_a_full_prefill_step_computes() -> None:
    r = replica_of(LLAMA70)
    overhead = r.figures.step_overhead_ms / 1e3
    seconds, watts = r.step(0, 0, 1, 0)
    assert seconds == pytest.approx(overhead + 70.6e9 / r.hbm_bytes_per_s, rel=1e-3)
    full, full_w = r.step(2048, 0, 0, 0)
    assert full == pytest.approx(overhead + 2 * 70.6e9 * 2048 / (r.flops * 0.5), rel=1e-6)
    assert watts < full_w <= r.power.peak  # a streaming chip draws less than a computing one
    # the array form prices alike
    many, many_w = r.steps(np.array([0.0, 2048.0]), np.zeros(2), np.array([1.0, 0.0]), np.zeros(2))
    assert many == pytest.approx([seconds, full], rel=1e-3)
    assert many_w == pytest.approx([watts, full_w], rel=1e-3)


def test_a_cap_slows_a_step_by_the_core_power_curve_and_holds_its_draw() -> None:
    r = replica_of(LLAMA70)
    free, draw = r.step(2048, 0, 0, 0)
    capped, capped_w = r.step(2048, 0, 0, 0, cap=700.0)
    assert capped == pytest.approx(free / r.power.speed(draw, 700.0))
    assert capped_w == 700.0 and capped > free
    # a decode step draws below the lowest cap: untouched
    assert r.step(0, 0, 4, 8000, cap=600.0) == r.step(0, 0, 4, 8000)


def test_token_mixes_keep_the_tail_and_merge_by_requests() -> None:
    prompts = np.arange(1, 1001, dtype=float)
    mix = TokenMix.from_samples(prompts, np.full(1000, 10.0))
    assert mix.weights.sum() == pytest.approx(1.0) and mix.prompts.size == 64
    assert mix.mean_prompt == pytest.approx(500.5, rel=0.01)
    assert mix.prompts[-1] >= 995  # the top point sits in the top half-percent
    short = TokenMix.fixed(100, 5)
    merged = merge_mixes([mix, short], [1, 3])
    assert merged.mean_prompt == pytest.approx((500.5 + 3 * 100) / 4, rel=0.03)
    assert Observation(0.0, 15.0, 30, short).rate == 2.0
    with pytest.raises(ValueError):
        TokenMix.from_samples([], [1])


@pytest.mark.parametrize("name", profile_names())
def test_every_serving_figure_is_an_assumption_of_every_profile(name: str) -> None:
    p = load_profile(name)
    fields = set(ServingFigures.model_fields)
    assert {f"serving.{f}" for f in fields} <= set(p.assumptions)
    assert all(p.figures[f"serving.{f}"].note for f in fields)  # each says why


def test_docs_list_every_serving_assumption() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Serving"):]
    listed = set(re.findall(r"`serving\.(\w+)`", section))
    assert listed == set(ServingFigures.model_fields)
