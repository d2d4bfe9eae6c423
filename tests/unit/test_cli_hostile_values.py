"""Hostile values on the command lines: every float option refuses NaN and infinity, a trace
must be a regular file of bounded size, and a million bad rows print one screen."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from ultraplane.simulator import traces

from ultraplane.cli import SUBCOMMANDS, LazyGroup, main
from ultraplane.commands.paramtypes import FiniteFloat


def every_command() -> list[tuple[str, click.Command]]:
    group = LazyGroup()
    found: list[tuple[str, click.Command]] = []
    ctx = click.Context(main)
    for name in SUBCOMMANDS:
        command = group.get_command(ctx, name)
        assert command is not None
        stack = [(name, command)]
        while stack:
            path, cmd = stack.pop()
            found.append((path, cmd))
            if isinstance(cmd, click.Group):
                stack.extend((f"{path} {n}", c) for n, c in cmd.commands.items())
    return found


def test_every_float_option_of_every_command_is_finite() -> None:
    floats = []
    for path, command in every_command():
        for param in command.params:
            if isinstance(param.type, click.types.FloatParamType):
                floats.append(f"{path} {param.opts[0]}")
                assert isinstance(param.type, FiniteFloat), f"{path} {param.opts[0]}"
    assert len(floats) >= 10, floats  # serve, simulate, simulator, operator


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize("args", [
    ["simulate", "--fleet", "trn3-gen2:1", "--trace", "t.csv", "--out", "o",
     "--chip-failure-rate"],
    ["serve", "--time-scale"],
    ["serve", "--tick-seconds"],
    ["operator", "--event-qps"],
])
def test_nan_and_infinity_are_refused_in_one_sentence(value: str, args: list[str],
                                                     tmp_path: Path) -> None:
    os.chdir(tmp_path)
    Path("t.csv").write_text("job_id,submission_time,duration,num_gpu\nj,0,60,4\n")
    result = CliRunner().invoke(main, [*args, value])
    assert result.exit_code == 2, result.output
    assert "is not a finite number" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_not_a_trace(device: str) -> None:
    if not Path(device).exists():
        pytest.skip(f"{device} is not on this system")
    with pytest.raises(ValueError, match="not a regular file"):
        traces.load_trace(device)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        traces.load_trace(fifo)


def test_a_trace_over_the_size_bound_is_refused(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.csv"
    big.write_text("job_id,submission_time,duration,num_gpu\n" + "j,0,60,4\n" * 1000)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 1024)
    with pytest.raises(ValueError, match="at most 1024 bytes"):
        traces.load_trace(big)


def test_bad_rows_are_capped_at_twenty_plus_a_count(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\n"
                   + "".join(f"j{i},x,60,4\n" for i in range(100_000)))
    jobs, rows = traces.load_trace(bad)
    assert jobs == [] and len(rows) == 20 and rows.total == 100_000
    os.chdir(tmp_path)
    result = CliRunner().invoke(main, ["simulate", "--fleet", "trn3-gen2:1", "--trace",
                                       str(bad), "--out", "o"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[0] == ("Error: 100000 bad row(s) in --trace (fix them or pass "
                        "--skip-bad-rows):")
    assert len(lines) == 22 and lines[-1].strip() == "... and 99980 more bad row(s)"
