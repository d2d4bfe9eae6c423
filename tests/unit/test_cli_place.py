"""`ultraplane place` / `ultraplane profiles`: output, exit codes, and bad input (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ultraplane.commands.placing import place, profiles

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "cluster.yaml"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(place, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_places_on_a_fleet_as_json() -> None:
    code, out = run("--fleet", "trn3-gen2:8", "--chips", "72", "-o", "json")
    assert code == 0
    body = json.loads(out)
    assert body["placed"] and body["chips"] == 72 and len(body["chipIds"]) == 72
    assert body["level"] == "rack" and body["ultraServers"] == ["gen2-0000"]


def test_table_output_and_big_gang() -> None:
    code, out = run("--fleet", "trn3-gen2:32", "--chips", "1152")
    assert code == 0
    assert "placed 1152 chips; tightest level: network-1" in out
    assert "gen2-0000" in out and "s00-s35" in out


def test_cluster_file_with_allocations() -> None:
    # gen2-0001 is taken, gen2-0002 unschedulable: 144 chips cannot fit now (exit 1) ...
    code, out = run("--cluster", str(EXAMPLE), "--chips", "144", "--profile", "trn3-gen2")
    assert code == 1 and "does not fit now (NoCapacity)" in out
    # ... 64 chips in one rack of gen2-0000 still can, avoiding the failed chip.
    code, out = run("--cluster", str(EXAMPLE), "--chips", "64", "--require", "rack",
                    "--profile", "trn3-gen2", "-o", "json")
    assert code == 0
    body = json.loads(out)
    assert body["ultraServers"] == ["gen2-0000"] and "gen2-0000/s03/c01" not in body["chipIds"]


def test_does_not_fit_json_names_the_blockers(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("ultraservers: [{name: u, profile: trn2}]\nallocations: {a/b: [u/s00]}\n")
    code, out = run("--cluster", str(path), "--chips", "64", "-o", "json")
    assert code == 1
    body = json.loads(out)
    assert body == {"placed": False, "kind": "NoCapacity", "message": body["message"],
                    "blocking": ["a/b"]}


@pytest.mark.parametrize(("args", "field"), [
    (["--fleet", "trn9:8", "--chips", "4"], "--fleet"),
    (["--fleet", "trn3-gen2", "--chips", "4"], "--fleet"),
    (["--fleet", "trn3-gen2:0", "--chips", "4"], "--fleet"),
    (["--fleet", "trn3-gen2:2", "--chips", "0"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "-3"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "many"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "4", "--require", "pod"], "--require"),
    (["--fleet", "trn3-gen2:2", "--chips", "4", "--prefer", "pod"], "--prefer"),
    (["--fleet", "trn3-gen2:2", "--chips", "5", "--require", "server"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "300"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "6", "--whole-servers"], "--chips"),
    (["--fleet", "trn3-gen2:2", "--chips", "4", "--profile", "x"], "--profile"),
    (["--cluster", "/nonexistent/c.yaml", "--chips", "4"], "--cluster"),
    (["--chips", "4"], "--fleet"),
])
def test_bad_input_exits_2_naming_the_field(args: list[str], field: str) -> None:
    code, out = run(*args)
    assert code == 2
    error = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and field in error[0], out
    assert "Traceback" not in out


def test_malformed_cluster_yaml_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("ultraservers: [\n")
    code, out = run("--cluster", str(path), "--chips", "4")
    assert code == 2 and "not valid YAML" in out and "--cluster" in out


def test_profiles_table_and_json() -> None:
    result = CliRunner().invoke(profiles, [])
    assert result.exit_code == 0 and "trn3-gen2" in result.output and "projected" in result.output
    result = CliRunner().invoke(profiles, ["-o", "json"])
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["trn3-gen2"]["ultraserverTflops"]["MXFP8"] == 362_448
    assert rows["trn3-gen1"]["ultraserverHbmGib"] == 9_216
    assert rows["trn3-gen2"]["chip"]["peakWatts"] > 0  # one camelCase vocabulary with the API


@pytest.mark.skipif(shutil.which("ultraplane") is None, reason="console script not installed")
def test_real_console_script() -> None:
    ok = subprocess.run(["ultraplane", "place", "--fleet", "trn3-gen2:2", "--chips", "4"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "placed 4 chips" in ok.stdout
    bad = subprocess.run(["ultraplane", "place", "--fleet", "nope:2", "--chips", "4"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--fleet" in bad.stderr and "Traceback" not in bad.stderr
