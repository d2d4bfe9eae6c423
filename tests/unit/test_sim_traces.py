"""Trace parsing: ITP columns, optional columns, bad rows named by line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from ultraplane.simulator.traces import TraceError, load_trace, parse_rows

ITP = Path(__file__).resolve().parents[2].parent / "shared/reference/traces/ms-itp-2021"


def parse(text: str) -> tuple[list, list]:
    return parse_rows(io.StringIO(text))


def test_itp_columns_and_optional_columns() -> None:
    jobs, bad = parse(
        "job_id,submission_time,duration,num_gpu,kind,priority,topology,model,precision\n"
        "a,0,100,8,,,,,\n"
        "b,5,10,144,inference,3,UltraServer,70b,mxfp8\n"
        "c,6,10,16,training,,block,,\n"
    )
    assert bad == []
    a, b, c = jobs
    assert (a.job_id, a.submit_s, a.duration_s, a.gpus, a.kind, a.precision) == ("a", 0, 100, 8, "training", "BF16")
    assert (b.kind, b.priority, b.topology, b.model_b, b.precision) == ("inference", 3, "ultraserver", 70.0, "MXFP8")
    assert c.topology == "network-1" and c.line == 4


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("x,abc,10,1", "submission_time"),
        ("x,0,-1,1", "duration"),
        ("x,0,10,0", "num_gpu"),
        ("x,0,10,1.5", "num_gpu"),
        (",0,10,1", "job_id"),
        ("x,0,10,1,batch,,,,", "kind"),
        ("x,0,10,1,,,galaxy,,", "topology"),
        ("x,0,10,1,,,,,INT3", "precision"),
        ("x,0,10,1,,,,-3,", "model"),
        ("x,0,nan,1", "duration"),
    ],
)
def test_bad_rows_named_by_line_and_field(row: str, field: str) -> None:
    header = "job_id,submission_time,duration,num_gpu,kind,priority,topology,model,precision\n"
    jobs, bad = parse(header + "ok,0,1,1,,,,,\n" + row + "\n")
    assert [j.job_id for j in jobs] == ["ok"]
    assert len(bad) == 1 and bad[0].line == 3 and field in bad[0].message


def test_duplicate_and_missing_header() -> None:
    _, bad = parse("job_id,submission_time,duration,num_gpu\na,0,1,1\na,0,1,1\n")
    assert [(b.line, "twice" in b.message) for b in bad] == [(3, True)]
    with pytest.raises(TraceError, match="num_gpu"):
        parse("job_id,submission_time,duration\na,0,1\n")


def test_real_itp_file_parses_cleanly() -> None:
    jobs, bad = load_trace(ITP / "cluster01.csv", prefix="c1/")
    assert bad == [] and len(jobs) == 1595
    assert jobs[0].job_id.startswith("c1/") and 1 <= max(j.gpus for j in jobs) <= 64


def test_bom_headers_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes("\ufeffjob_id,submission_time,duration,num_gpu\r\na,0,60,4\r\n".encode())
    jobs, bad = load_trace(path)
    assert [j.job_id for j in jobs] == ["a"] and bad == []


def test_absurd_values_and_broken_quoting_are_rejected_with_the_row() -> None:
    text = ["job_id,submission_time,duration,num_gpu\n", "ok,0,60,4\n", "long,0,1e18,4\n",
            "many,0,60,99999999999\n", '"open,0,60,4\n', "never,0,60,4\n"]
    jobs, bad = parse_rows(text)
    assert [j.job_id for j in jobs] == ["ok"]
    assert [(b.line, b.message.split(" ")[0]) for b in bad] == [
        (3, "duration"), (4, "num_gpu"), (5, "broken")]
    assert "the rows after it were not read" in bad[-1].message
