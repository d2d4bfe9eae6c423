"""Hardware profile figures: aggregates computed from per-chip data match the published totals."""

from __future__ import annotations

import pytest

from ultraplane.hardware.profiles import Precision, UnknownProfileError, load_profile, profile_names


def test_the_four_profiles_ship() -> None:
    assert profile_names() == ["trn2", "trn3-gen1", "trn3-gen2", "trn4-projected"]


# (profile, chips per UltraServer, MXFP8 TFLOPS, HBM GiB, HBM TB/s) -- AWS Neuron docs, Trn3 page
PUBLISHED = [
    ("trn3-gen2", 144, 362_448, 20_736, 705.6),
    ("trn3-gen1", 64, 161_088, 9_216, 313.6),
]


@pytest.mark.parametrize(("name", "chips", "tflops", "gib", "tbps"), PUBLISHED)
def test_aggregates_match_published(name: str, chips: int, tflops: float, gib: float,
                                   tbps: float) -> None:
    p = load_profile(name)
    assert p.chips_per_ultraserver == chips
    assert p.ultraserver_tflops(Precision.MXFP8) == pytest.approx(tflops)
    assert p.ultraserver_hbm_gib() == pytest.approx(gib)
    assert p.ultraserver_hbm_tbps() == pytest.approx(tbps)


def test_gen2_layout_and_its_assumptions_are_named() -> None:
    p = load_profile("trn3-gen2")
    assert (p.servers_per_ultraserver, p.chips_per_server, p.racks_per_ultraserver) == (36, 4, 2)
    assert p.servers_per_rack == 18
    assert p.bandwidth_gbps == {"server": 256, "rack": 320, "ultraserver": 128}
    assert p.efa_gbps == 28_800
    assert {"racks_per_ultraserver", "chip.peak_watts", "chip.idle_watts"} <= set(p.assumptions)
    assert p.chip.peak_watts == 1000 and p.chip.idle_watts == pytest.approx(0.3 * 1000)
    assert p.figures["chips_per_server"].source  # cited, not assumed


def test_trn2_is_four_instances_of_sixteen_chips() -> None:
    p = load_profile("trn2")
    assert (p.servers_per_ultraserver, p.chips_per_server, p.racks_per_ultraserver) == (4, 16, 1)
    assert p.chip.tflops[Precision.FP8] == 1299 and Precision.MXFP8 not in p.chip.tflops
    assert p.ultraserver_tflops("MXFP8") == 0.0
    assert p.chip.peak_watts == 500


def test_trn4_is_marked_projected_and_every_figure_is_an_assumption() -> None:
    p = load_profile("trn4-projected")
    assert p.projected and all(not load_profile(n).projected for n in profile_names()[:-1])
    assert all(f.assumption for f in p.chip.figures.values())
    trn3 = load_profile("trn3-gen2").chip
    assert p.chip.tflops[Precision.MXFP4] == 6 * trn3.tflops[Precision.MXFP4]
    assert p.chip.hbm_tbps == pytest.approx(4 * trn3.hbm_tbps)


def test_profiles_are_frozen() -> None:
    p = load_profile("trn3-gen2")
    with pytest.raises(Exception, match="frozen"):
        p.chips_per_server = 8  # type: ignore[misc]


def test_unknown_profile_lists_known_names() -> None:
    with pytest.raises(UnknownProfileError, match="trn3-gen2") as err:
        load_profile("trn9")
    assert isinstance(err.value, ValueError)
