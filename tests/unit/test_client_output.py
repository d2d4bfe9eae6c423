"""The client's output: kubectl-style tables and ages, sacct columns, manifests, one level
parser and one camelCase vocabulary with the API."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from ultraplane.api.client import manifests, sacct
from ultraplane.api.client.tables import age, span, table
from ultraplane.api.client.transports import ClientError
from ultraplane.api.schemas import DryRunRequest

from ultraplane.hardware.topology import canonical_level, parse_level


@pytest.mark.parametrize(("seconds", "shown"), [
    (5, "5s"), (119, "119s"), (300, "5m"), (330, "5m30s"), (3 * 3600, "3h"),
    (3 * 3600 + 600, "3h10m"), (30 * 3600, "30h"), (3 * 86400 + 3600, "3d1h"), (30 * 86400, "30d"),
])
def test_ages_read_as_kubectl_prints_them(seconds: int, shown: str) -> None:
    assert span(seconds) == shown


def test_age_of_a_timestamp() -> None:
    assert age("1970-01-01T00:05:00Z", 600.0) == "5m"
    assert age(None, 0.0) == "<unknown>"


def test_tables_have_kubectl_columns() -> None:
    out = table(["name", "chips"], [["a", 4], ["longer", None]]).splitlines()
    assert out == ["NAME     CHIPS", "a        4", "longer   <none>"]
    assert not any(c in "".join(out) for c in "│┃─━+|")


def test_sacct_times_durations_and_format() -> None:
    assert sacct.when(1796605323.0) == "2026-12-07T01:02:03"
    assert sacct.duration(93784) == "1-02:03:04" and sacct.duration(3723) == "01:02:03"
    row = {"jobUid": "0123456789", "name": "train", "phase": "Succeeded", "chips": 144,
           "startedS": 1796605323.0, "finishedS": 1796605323.0 + 93784, "chipHours": 3751.36}
    out = sacct.render([row], "jobname%8,state,elapsed,chiphours").splitlines()
    assert out[0].split() == ["JobName", "State", "Elapsed", "ChipHours"]
    assert set(out[1]) <= {"-", " "}
    assert out[2].split() == ["train", "SUCCEEDED", "1-02:03:04", "3751.36"]
    assert sacct.render([row], "jobid,end", parsable=True).splitlines()[1] == \
        "01234567|2026-12-08T03:05:07"


def test_an_unknown_format_field_is_exit_2_naming_the_fields() -> None:
    with pytest.raises(ClientError) as caught:
        sacct.columns("jobname,cpus")
    assert caught.value.code == 2 and "'cpus'" in str(caught.value) and "chiphours" in str(caught.value)


def test_manifests_yaml_json_and_several_documents() -> None:
    text = ("apiVersion: ultraplane.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: a}\n"
            "spec: {chips: 4}\n---\n"
            '{"apiVersion": "ultraplane.dev/v1alpha1", "kind": "InferenceJob",'
            ' "metadata": {"name": "b", "namespace": "serve"}, "spec": {"replicas": 1}}\n')
    got = manifests.parse("jobs.yaml", text)
    assert [(m.kind, m.name, m.namespace) for m in got] == [
        ("TrainingJob", "a", None), ("InferenceJob", "b", "serve")]


@pytest.mark.parametrize(("text", "says"), [
    ("kind: Pod\napiVersion: v1\nmetadata: {name: a}\nspec: {}\n", "kind 'Pod'"),
    ("kind: TrainingJob\napiVersion: batch/v1\nmetadata: {name: a}\nspec: {}\n", "apiVersion"),
    ("kind: TrainingJob\napiVersion: ultraplane.dev/v1alpha1\nspec: {}\n", "metadata.name"),
    ("kind: [\n", "cannot parse it at line"),
    ("", "holds no manifest"),
])
def test_bad_manifests_are_one_sentence_exit_2(text: str, says: str) -> None:
    with pytest.raises(ClientError) as caught:
        manifests.parse("m.yaml", text)
    assert caught.value.code == 2 and says in str(caught.value) and "m.yaml" in str(caught.value)


def test_one_level_parser_for_the_cli_and_the_api() -> None:
    assert canonical_level("Rack") == parse_level("Rack").name == "rack"
    assert canonical_level("BLOCK") == "network-1"
    body = DryRunRequest.model_validate({"chips": 4, "requiredLevel": "Rack",
                                         "preferredLevel": "Server"})
    assert (str(body.required_level), str(body.preferred_level)) == ("rack", "server")
    with pytest.raises(ValidationError, match="unknown topology level 'galaxy'"):
        DryRunRequest.model_validate({"chips": 4, "requiredLevel": "galaxy"})


@pytest.mark.parametrize(("words", "cword", "offered"), [
    ("ultraplane w", "1", "plain,why"),
    ("ultraplane get -o ", "3", "plain,yaml"),
])
def test_shell_completion_offers_the_client(words: str, cword: str, offered: str) -> None:
    from click.testing import CliRunner

    from ultraplane.cli import main

    env = {"_ULTRAPLANE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": cword}
    result = CliRunner().invoke(main, [], prog_name="ultraplane", env=env)
    assert offered in result.output.splitlines(), result.output


def test_get_ij_shows_replicas_ready_of_wanted() -> None:
    from ultraplane.api.client.views import job_rows

    jobs = [
        {"kind": "InferenceJob", "metadata": {"name": "pods"}, "spec": {"replicas": 5},
         "status": {"phase": "Running", "replicas": 4, "readyReplicas": 3, "chips": 20}},
        {"kind": "InferenceJob", "metadata": {"name": "simulated"}, "spec": {"replicas": 2},
         "status": {"phase": "Running", "replicas": 2, "chips": 8}},
        {"kind": "InferenceJob", "metadata": {"name": "waits"}, "spec": {"replicas": 3},
         "status": {"phase": "Pending", "chips": 12}},
    ]
    headers, rows = job_rows(jobs, now_s=0.0, wide=False, namespaces=False, kinds=False,
                             replicas=True)
    assert headers[:4] == ["NAME", "PHASE", "REPLICAS", "CHIPS"]
    assert [r[2] for r in rows] == ["3/5", "2/2", "0/3"]
    headers, _ = job_rows(jobs, now_s=0.0, wide=False, namespaces=False, kinds=True)
    assert "REPLICAS" not in headers  # both kinds listed: the column is the InferenceJobs'


def test_get_ij_shows_the_load_read_and_ttft_p99_against_the_objective() -> None:
    from ultraplane.api.client.views import job_rows

    jobs = [
        {"kind": "InferenceJob", "metadata": {"name": "chat"},
         "spec": {"replicas": 3, "autoscaling": {"maxReplicas": 8, "objective": {
             "timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 50}}},
         "status": {"phase": "Running", "replicas": 3, "load": {
             "requestsPerSecond": 1830.04, "ttftP99Ms": 1320.4}}},
        {"kind": "InferenceJob", "metadata": {"name": "fixed"}, "spec": {"replicas": 2},
         "status": {"phase": "Running", "replicas": 2}},
    ]
    headers, rows = job_rows(jobs, now_s=0.0, wide=False, namespaces=False, kinds=False,
                             replicas=True)
    at = headers.index("LOAD")
    assert headers[at + 1] == "TTFT-P99"
    assert [r[at:at + 2] for r in rows] == [["1,830.0/s", "1,320/1,000ms"], [None, None]]
