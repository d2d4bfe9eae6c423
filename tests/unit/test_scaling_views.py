"""`kubectl ultraplane why` of an autoscaled InferenceJob: the last scaling decision, the load
it was read from and the p99s against the objective (`api.client.views.scaling_text`)."""

from __future__ import annotations

from typing import Any

from ultraplane.api.client.views import scaling_text


def served(status: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "InferenceJob", "metadata": {"name": "chat", "namespace": "ns"},
            "spec": {"replicas": 9, "autoscaling": {
                "minReplicas": 2, "maxReplicas": 12, "scaleDownDelaySeconds": 120,
                "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}}},
            "status": status}


def test_why_says_the_last_decision_the_load_and_the_p99s_against_the_objective() -> None:
    text = scaling_text(served({
        "scalingMessage": "scaled 6 → 9: forecast 2,140 req/s (observed 1,830.0 req/s); ...",
        "desiredReplicas": 9, "replicas": 8, "readyReplicas": 7,
        "load": {"requestsPerSecond": 1830.0, "promptTokensPerRequest": 2342.5,
                 "outputTokensPerRequest": 23.4, "ttftP99Ms": 1320.0, "tpotP99Ms": 31.0,
                 "sloAttainment": 0.973}}))
    assert text.splitlines() == [
        "Scaling: scaled 6 → 9: forecast 2,140 req/s (observed 1,830.0 req/s); ...",
        "Load: 1,830.0 req/s; 2,342 prompt and 23 output tokens a request; p99 TTFT 1,320 ms "
        "(objective 1,000 ms), TPOT 31 ms (objective 50 ms); 97.3% of requests within both",
        "Replicas: 9 wanted, 9 desired, 8 placed, 7 ready (autoscaling 2-12, scale-down "
        "delay 120 s)"]


def test_why_of_a_job_without_a_load_read_says_only_what_it_knows() -> None:
    text = scaling_text(served({"replicas": 2}))
    assert text == "Replicas: 9 wanted, 9 desired, 2 placed, 0 ready (autoscaling 2-12, " \
                   "scale-down delay 120 s)"
    assert scaling_text({"kind": "TrainingJob", "spec": {}, "status": {}}) == ""
