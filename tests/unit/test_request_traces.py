"""The simulated model servers' request trace and its rate steps (`serving.requesttraces`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ultraplane.serving.requesttraces import RateSteps, RequestTrace

AZURE = Path("/work/shared/reference/traces/inference/azure-llm-2023-code.csv")


def write(tmp: Path, rows: list[str], header: str = "TIMESTAMP,ContextTokens,GeneratedTokens"
          ) -> Path:
    path = tmp / "t.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def four(tmp: Path) -> RequestTrace:
    # arrivals at 0, 1, 2, 3 s: one loop lasts 4 s (the last arrival plus the mean gap)
    return RequestTrace.load(write(tmp, [f"2024-01-01 00:00:0{i}.0000000,{100 * (i + 1)},{i + 1}"
                                         for i in range(4)]))


def test_requests_between_two_instants_loop_past_the_end(tmp_path: Path) -> None:
    trace = four(tmp_path)
    assert trace.duration_s == pytest.approx(4.0)
    prompts, outputs = trace.between(1.0, 3.0)
    assert prompts.tolist() == [200, 300] and outputs.tolist() == [2, 3]
    prompts, _ = trace.between(3.0, 6.0)  # 3 s of this loop, then 0 and 1 s of the next
    assert prompts.tolist() == [400, 100, 200]


def test_a_rate_multiple_repeats_requests_evenly(tmp_path: Path) -> None:
    trace = four(tmp_path)
    assert trace.between(0.0, 4.0, 2.0)[0].tolist() == [100, 100, 200, 200, 300, 300, 400, 400]
    assert trace.between(0.0, 8.0, 0.5)[0].size == 4  # every other request of two loops
    assert trace.between(0.0, 4.0, 0.0)[0].size == 0


def test_the_azure_trace_reads() -> None:
    trace = RequestTrace.load(AZURE)
    assert trace.offsets.size > 1000 and trace.offsets[0] == 0.0
    assert (trace.prompts >= 1).all() and (trace.outputs >= 1).all()


def test_a_file_that_is_not_a_trace_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the columns TIMESTAMP, ContextTokens"):
        RequestTrace.load(write(tmp_path, ["1,2"], header="a,b"))
    with pytest.raises(ValueError, match="bad request row"):
        RequestTrace.load(write(tmp_path, ["yesterday,5,5"]))
    with pytest.raises(ValueError, match="no requests"):
        RequestTrace.load(write(tmp_path, []))


def test_rate_steps() -> None:
    steps = RateSteps.parse("0:1, 120:3,300:0.5")
    assert [steps.at(t) for t in (0, 119.9, 120, 299, 300, 1e6)] == [1, 1, 3, 3, 0.5, 0.5]
    assert RateSteps.parse("60:2").at(10) == 1.0  # before the first step: the trace as is
    for bad in ("", "x", "1:y", "-1:2", "5:-1"):
        with pytest.raises(ValueError):
            RateSteps.parse(bad)
