"""`ultraplane simulate --inference`: the services beside the training trace under the three
scaling policies, summary.json's new keys, the plot, and bad input (exit 2, one sentence)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from ultraplane.cli import main

SERVICES = """\
- name: code
  model: llama-3-70b
  chipsPerReplica: 16
  precision: FP8
  priority: 100
  autoscaling:
    minReplicas: 1
    maxReplicas: 8
    objective: {timeToFirstTokenMs: 1000, timePerOutputTokenMs: 50}
  durationSeconds: 900
  requests: {trace: requests.csv, rateScale: 100, loop: true}
"""
KEYS = {"requests", "slo_attainment", "ttft_p99_ms", "tpot_p99_ms", "output_tokens",
        "energy_kwh", "output_tokens_per_kwh", "replica_hours", "scale_up_wait_p99_s"}


def files(tmp_path: Path, services: str = SERVICES) -> tuple[Path, Path]:
    # five minutes at 50 req/s then five at 250 req/s (one request every 2 s, then 0.4 s)
    times = [i * 2.0 for i in range(150)] + [300 + i * 0.4 for i in range(750)]
    (tmp_path / "requests.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"{t:.2f},2000,30\n" for t in times))
    (tmp_path / "services.yaml").write_text(services)
    (tmp_path / "jobs.csv").write_text("job_id,submission_time,duration,num_gpu\n"
                                       "t,0,100000,24\nu,60,600,2\n")
    return tmp_path / "services.yaml", tmp_path / "jobs.csv"


def simulate(*args: str) -> Result:
    return CliRunner().invoke(main, ["simulate", "--fleet", "trn3-gen2:1", "--no-progress",
                                     *args])


def test_services_beside_training_under_three_policies(tmp_path: Path) -> None:
    services, jobs = files(tmp_path)
    out = tmp_path / "out"
    res = simulate("--trace", str(jobs), "--chips-per-gpu", "4", "--inference", str(services),
                   "--out", str(out))
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    policies = {"ultraplane", "static-peak", "hpa"}
    assert set(summary["inference"]["code"]) == policies
    for figures in summary["inference"]["code"].values():
        assert set(figures) >= KEYS
        # the trace's 10 minutes and a mean gap loop every 11: then 4 minutes of the next
        assert figures["requests"] == (150 + 750) * 100 + 4 * 60 * 50
    assert set(summary["training_useful_chip_hours"]) == policies
    assert policies <= set(summary)  # each run's training figures, as the other replays
    assert "code under  ultraplane:" in res.output
    page = (out / "report.html").read_text()
    assert "Service code over time" in page and (out / "service_code.png").is_file()


def test_services_alone(tmp_path: Path) -> None:
    services, _ = files(tmp_path)
    res = simulate("--inference", str(services), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["inference"]["code"]["static-peak"]["slo_attainment"] > 0.9


def test_bad_services_are_exit_2_with_a_sentence(tmp_path: Path) -> None:
    services, jobs = files(tmp_path, SERVICES.replace("llama-3-70b", "llama-9"))
    res = simulate("--trace", str(jobs), "--inference", str(services), "--out",
                   str(tmp_path / "out"))
    assert res.exit_code == 2
    assert "--inference" in res.output and "unknown model 'llama-9'" in res.output
    services, jobs = files(tmp_path, SERVICES.replace("chipsPerReplica: 16",
                                                      "chipsPerReplica: 160"))
    res = simulate("--inference", str(services), "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "does not fit one UltraServer" in res.output
    services, _ = files(tmp_path)
    (tmp_path / "requests.csv").write_text("when,prompt\n1,2\n")
    res = simulate("--inference", str(tmp_path / "services.yaml"), "--out",
                   str(tmp_path / "out"))
    assert res.exit_code == 2 and "missing column" in res.output
    res = simulate("--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "--inference" in res.output
    res = simulate("--inference", str(services), "--chip-failure-rate", "0.01", "--out",
                   str(tmp_path / "out"))
    assert res.exit_code == 2 and "does not combine" in res.output
