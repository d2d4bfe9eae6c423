"""The pod data plane's scale benchmark runs end to end on the real API server tier.

`bench/pods.py --quick` (8 UltraServers, 288 Node objects, 100 mixed jobs) starts its own
kube-apiserver and etcd from the tier's binaries, the operator with pods on, and plays the
kubelets. Here it must launch and complete every job, and end with its JSON line; the full run
(2,304 Nodes, 1,000 jobs) is the same code with larger figures. Its speed is not asserted: a
benchmark's figures move with the machine (see docs/operator.md for the measured ones).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.kube_tier import KubeEnv

REPO = Path(__file__).resolve().parents[2]


def test_the_quick_benchmark_launches_and_completes_every_job(kube_env: KubeEnv) -> None:
    # kube_env: the tier's binaries exist (or the tier is reported as the other tests report
    # it); the benchmark starts a server of its own, so nothing here touches the shared one.
    done = subprocess.run([sys.executable, str(REPO / "bench" / "pods.py"), "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert list(figures)[:5] == ["nodes", "jobs", "pods", "pods_per_s",
                                 "admit_to_all_running_p99_s"]
    assert figures["complete"] is True, done.stdout[-3000:]
    assert figures["nodes"] == 8 * 36
    assert figures["jobs"] == figures["jobs_finished"] == 100
    assert figures["jobs_failed"] == 0
    assert figures["pods"] >= 100  # every job launched at least one pod
    assert figures["pods_per_s"] > 0 and figures["admit_to_all_running_p99_s"] > 0
    assert any(line.startswith("targets: pods/s >= 100:") for line in lines)
