"""`ultraplane serve` flag errors: exit code 2 and one sentence naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ultraplane.cli import main


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--fleet", "bogus:x"], "--fleet"),
        (["--fleet", "trn9:2"], "--fleet"),
        (["--fleet", "trn3-gen2:2", "--cluster", "c.yaml"], "--fleet"),
        (["--time-scale", "-1"], "--time-scale"),
        (["--db", "not a url"], "--db"),
        (["--db", "postgresql://u@127.0.0.1:1/x"], "--db"),
        (["--token-file", "/nonexistent/tokens"], "--token-file"),
        (["--cluster", "/nonexistent/cluster.yaml"], "--cluster"),
        (["--backend", "mainframe"], "--backend"),
        (["--inference-trace", "/nonexistent/requests.csv"], "--inference-trace"),
        (["--rate-scale", "0"], "--rate-scale"),
        (["--autoscale-seconds", "-5"], "--autoscale-seconds"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], flag: str, tmp_path: Path) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'c.db'}"] if "--db" not in args else []
    result = CliRunner().invoke(main, ["serve", *db, *args])
    assert result.exit_code == 2, result.output
    assert flag in result.output
    assert "Traceback" not in result.output


def test_port_in_use_exits_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--db", f"sqlite:///{tmp_path / 'c.db'}",
                                           "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert "--port" in result.output and str(port) in result.output
