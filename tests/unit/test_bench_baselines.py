"""The allocator benchmark's two baselines choose as their docstrings say (bench/*.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from best_fit import BestFit
from first_fit import FirstFit


def us_of(alloc: FirstFit, job: str) -> set[int]:
    return {u for u, _, _ in alloc.jobs[job]}


# Two blocks of two UltraServers (144 chips each):
#   block 0: u0 [100 used | 44 free]  u1 [idle]      block 1: u2 [140 used | 4 free]  u3 [idle]
def loaded(cls: type[FirstFit]) -> FirstFit:
    alloc = cls(4, per_block=2)
    assert alloc.allocate("u0-load", 100) and us_of(alloc, "u0-load") == {0}
    assert alloc.allocate("u1-idle", 144) and alloc.allocate("u2-load", 140)
    alloc.release("u1-idle")
    assert us_of(alloc, "u2-load") == {2}
    return alloc


def test_first_fit_takes_the_first_ultraserver_that_fits() -> None:
    alloc = loaded(FirstFit)
    assert alloc.allocate("small", 4) and us_of(alloc, "small") == {0}
    assert alloc.allocate("whole", 144) and us_of(alloc, "whole") == {1}


def test_best_fit_takes_the_fullest_ultraserver_and_the_block_with_fewest_idle() -> None:
    alloc = loaded(BestFit)
    assert alloc.allocate("small", 4) and us_of(alloc, "small") == {2}  # 4 free: tightest
    assert alloc.allocate("mid", 40) and us_of(alloc, "mid") == {0}  # 44 free: the only fit
    assert alloc.allocate("whole", 144) and us_of(alloc, "whole") == {1}  # first idle, tie
    # Now block 0 has no idle UltraServer and block 1 has one: a 2-UltraServer gang fits nowhere.
    assert not alloc.allocate("two", 288)
    alloc.release("whole")
    alloc.release("u2-load")
    alloc.release("small")
    # Gangs of up to one UltraServer choose by free chips only: u1, u2, u3 tie, lowest id wins.
    assert alloc.allocate("whole", 144) and us_of(alloc, "whole") == {1}
    assert alloc.allocate("two", 288) and us_of(alloc, "two") == {2, 3}
    assert sum(alloc.free) == 4 * 144 - 100 - 40 - 144 - 288


# Two blocks of three UltraServers:  block 0: three idle   block 1: u3 [4 used], two idle
# A 2-UltraServer gang: first-fit takes block 0 (the first with enough idle), best fit block 1
# (the fewest idle that still has enough), keeping block 0 whole for a 3-UltraServer gang.
def test_multi_ultraserver_gangs_first_block_vs_fewest_idle_block() -> None:
    for cls, block, three_fits in ((FirstFit, {0, 1}, False), (BestFit, {4, 5}, True)):
        alloc = cls(6, per_block=3)
        assert alloc.allocate("busy", 144) and alloc.allocate("b1", 144)
        assert alloc.allocate("b2", 144) and alloc.allocate("u3", 4)
        for job in ("busy", "b1", "b2"):
            alloc.release(job)
        assert us_of(alloc, "u3") == {3}
        assert alloc.allocate("two", 288) and us_of(alloc, "two") == block, cls
        assert alloc.allocate("three", 432) is three_fits, cls
