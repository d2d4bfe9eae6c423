"""Fuzzing the command line: no input gets a traceback or a hang.

Hypothesis writes cluster files (raw bytes, and YAML built from the format's own keys
with hostile values), trace CSVs (BOMs, stray quotes, NULs, 1e18 durations, huge
counts) and option values, runs `ultraplane place` and `ultraplane simulate` in
process, and checks the contract of docs/allocator.md and docs/simulator.md: exit
code 0 or 1 for a valid request, 2 for bad input with exactly one `Error:` line, and
never an exception. The budget is fixed (examples per test, derandomized so CI runs
the same cases every time) and every example must finish within `BOUND_S`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ultraplane.simulator.cli import simulate
from ultraplane.simulator.traces import parse_rows

from ultraplane.commands.placing import place

BOUND_S = 20.0
FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
HEADER = "job_id,submission_time,duration,num_gpu,kind,priority,topology,model,precision"

hostile_numbers = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([0, -1, 1, 8192, 8193, 99_999_999, 2**63, 10**308]),
    st.floats(allow_nan=True, allow_infinity=True),
)
hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "trn3-gen2", "gen2-0000", "gen2-0000/s00", "gen2-0000/s00/c00",
                     "network-99999999999", "block", "../x", "\x00", "\ufeff", "y'; --",
                     "1e18", "nan", "-inf", '"', 'a"b', "trn3-gen2:99999999"]),
)
scalars = st.one_of(hostile_numbers, hostile_text, st.booleans(), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)), max_leaves=12)
KEYS = ["name", "profile", "network", "failedChips", "cordonedServers", "schedulable",
        "servers", "fleet", "count", "perBlock", "prefix"]
ultraserver = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)
cluster_doc = st.fixed_dictionaries(
    {"ultraservers": st.one_of(st.lists(ultraserver, max_size=4), values)},
    optional={"allocations": st.one_of(
        st.dictionaries(hostile_text, st.lists(hostile_text, max_size=3), max_size=3), values)},
)


def check_contract(result: Result, *, codes: tuple[int, ...] = (0, 1, 2)) -> None:
    text = result.output  # stdout and stderr, interleaved
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{text}")
    assert "Traceback" not in text, text
    assert result.exit_code in codes, (result.exit_code, text)
    if result.exit_code == 2:
        errors = [line for line in text.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and len(errors[0]) > len("Error: "), text


def invoke(command: Any, args: list[str]) -> Result:
    started = time.monotonic()
    result = CliRunner().invoke(command, args, catch_exceptions=True)
    assert time.monotonic() - started < BOUND_S, f"{args} took over {BOUND_S} s"
    return result


@FUZZ
@given(raw=st.one_of(st.binary(max_size=400),
                     cluster_doc.map(lambda d: yaml.safe_dump(d, allow_unicode=True).encode()),
                     st.text(max_size=300).map(str.encode)),
       chips=st.sampled_from(["4", "144", "0", "-3", "1e3", "99999999999999999999"]))
def test_place_never_crashes_on_a_cluster_file(tmp_path_factory: Any, raw: bytes, chips: str) -> None:
    path = Path(tmp_path_factory.mktemp("cluster")) / "cluster.yaml"
    path.write_bytes(raw)
    check_contract(invoke(place, ["--cluster", str(path), "--chips", chips]))


@FUZZ
@given(fleet=st.one_of(hostile_text, st.builds(lambda n: f"trn3-gen2:{n}", hostile_numbers)),
       chips=st.one_of(hostile_text, hostile_numbers.map(str)),
       level=st.one_of(hostile_text, st.integers(-5, 10**12).map(lambda n: f"network-{n}")),
       profile=hostile_text)
def test_place_never_crashes_on_option_values(fleet: str, chips: str, level: str, profile: str) -> None:
    args = ["--fleet", fleet, "--chips", chips, "--require", level, "--profile", profile]
    check_contract(invoke(place, [a.replace("\x00", "") for a in args]))


field = st.one_of(hostile_text, hostile_numbers.map(str), st.just('"unterminated'))
row = st.lists(field, min_size=1, max_size=10).map(lambda cells: ",".join(cells))
trace_text = st.builds(
    lambda bom, header, rows: ("\ufeff" if bom else "") + header + "\n" + "\n".join(rows) + "\n",
    st.booleans(), st.sampled_from([HEADER, "job_id,duration", "", '"job_id,submission_time']),
    st.lists(row, max_size=6))


@FUZZ
@given(text=trace_text)
def test_trace_rows_are_jobs_or_bad_rows_named_by_line(text: str) -> None:
    try:
        jobs, bad = parse_rows(text.splitlines(keepends=True), "t.csv")
    except ValueError as exc:  # TraceError: the header itself, as line 1
        assert "line 1:" in str(exc)
        return
    for job in jobs:
        assert 0 < job.duration_s <= 366 * 86400 and 1 <= job.gpus <= 1_048_576
    for b in bad:
        assert b.line >= 2 and "\n" not in b.message


@FUZZ
@given(text=trace_text,
       fleet=st.one_of(hostile_text, st.builds(lambda n: f"trn3-gen2:{n}", hostile_numbers)),
       rate=hostile_numbers.map(str), fail=st.one_of(hostile_text, hostile_numbers.map(
           lambda n: f"{n}:gen2-0000/s00")), interval=hostile_numbers.map(str),
       out=st.sampled_from(["report", "/proc/nope", "/dev/null/x"]))
def test_simulate_never_crashes_on_traces_and_options(
    tmp_path_factory: Any, text: str, fleet: str, rate: str, fail: str, interval: str, out: str
) -> None:
    folder = Path(tmp_path_factory.mktemp("sim"))
    trace = folder / "t.csv"
    # A last row that is always bad keeps the run to parsing and checking: exit 2, no replay.
    trace.write_text(text + "bad,-1,0,0\n", encoding="utf-8", errors="surrogatepass")
    args = ["--fleet", fleet, "--trace", str(trace), "--out", str(folder / out)
            if not out.startswith("/") else out, "--chip-failure-rate", rate,
            "--server-failure-rate", rate, "--fail", fail, "--checkpoint-interval", interval,
            "--policy", "ultraplane", "--no-progress"]
    check_contract(invoke(simulate, [a.replace("\x00", "") for a in args]), codes=(2,))
