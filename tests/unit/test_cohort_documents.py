"""TenantCohorts in `--queues` files and as resources: read into the core's cohorts, a cycle
of parents refused with a sentence (CLI exit 2), and a replay that borrows through a parent."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from pydantic import ValidationError

from ultraplane.cli import main
from ultraplane.policies.cohortdocuments import InvalidCohortError, cohort_specs
from ultraplane.policies.cohorts import CohortSpec
from ultraplane.policies.queuedocuments import queue_specs
from ultraplane.resources.tenantcohorts import TenantCohort

GEN2 = "trn3-gen2"

TWO_LEVELS = """\
- {kind: TenantCohort, name: org, fairSharing: {usageHalfLifeSeconds: 86400}}
- {kind: TenantCohort, name: ml, parent: org, weight: 3, borrowingLimit: 144}
- apiVersion: ultraplane.dev/v1alpha1
  kind: TenantCohort
  metadata: {name: web}
  spec: {parent: org, lendingLimit: 72, nominal: {trn3-gen2: 144}}
- {name: a, nominal: {trn3-gen2: 144}, cohort: ml}
- {name: w, nominal: {trn3-gen2: 0}, cohort: web}
"""


def simulate(*args: str) -> Result:
    return CliRunner().invoke(main, ["simulate", *args])


def test_a_queues_file_holds_cohorts_beside_queues() -> None:
    data = yaml.safe_load(TWO_LEVELS)
    assert [q.name for q in queue_specs(data)] == ["a", "w"]
    assert cohort_specs(data) == [
        CohortSpec("org", usage_half_life_s=86400.0),
        CohortSpec("ml", "org", weight=3.0, borrowing_limit=144),
        CohortSpec("web", "org", {GEN2: 144}, lending_limit=72)]


@pytest.mark.parametrize(("entries", "says"), [
    ("- {kind: TenantCohort, name: a, parent: b}\n- {kind: TenantCohort, name: b, parent: a}\n",
     "cohort parents form a cycle: a -> b -> a"),
    ("- {kind: TenantCohort, name: a, parent: a}\n", "names itself as its parent"),
    ("- {kind: TenantCohort, name: a, weight: 0}\n", "cohort a: weight"),
    ("- {kind: TenantCohort, name: a}\n- {kind: TenantCohort, name: a}\n", "defined twice"),
])
def test_bad_cohorts_are_refused_with_a_sentence(entries: str, says: str) -> None:
    with pytest.raises(InvalidCohortError, match=says):
        cohort_specs(yaml.safe_load(entries))


def test_simulate_refuses_a_cycle_with_exit_2_and_borrows_through_a_parent(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    # a holds 144 of its own and borrows web's pool through org (web lends 72 of it)
    trace.write_text("job_id,submission_time,duration,num_gpu,tenant\n"
                     "a1,0,1000,36,a\na2,0,1000,18,a\na3,0,1000,18,a\n")
    queues = tmp_path / "q.yaml"
    queues.write_text(TWO_LEVELS)
    got = simulate("--fleet", f"{GEN2}:3", "--trace", str(trace), "--out", str(tmp_path / "o"),
                   "--queues", str(queues), "--policy", "ultraplane", "--chips-per-gpu", "4",
                   "--no-progress")
    assert got.exit_code == 0, got.output
    rows = json.loads((tmp_path / "o/summary.json").read_text())["ultraplane"]
    assert rows["tenants"]["a"]["chips_borrowed_mean"] > 0
    # two of a's jobs start at once (144 + 72 borrowed: web lends 72 of its pool), and the
    # third waits for one to end, on a fleet with an idle UltraServer
    starts = sorted(float(r["start_s"]) for r in csv.DictReader((tmp_path / "o/jobs.csv").open()))
    assert starts[:2] == [0.0, 0.0] and starts[2] >= 1000.0
    queues.write_text(TWO_LEVELS.replace("name: org,", "name: org, parent: web,"))
    got = simulate("--fleet", f"{GEN2}:3", "--trace", str(trace), "--out", str(tmp_path / "o"),
                   "--queues", str(queues))
    assert got.exit_code == 2 and "form a cycle" in got.output and "--queues" in got.output


def test_the_resource_refuses_unknown_fields_and_bad_limits() -> None:
    body = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TenantCohort",
            "metadata": {"name": "ml"}, "spec": {"parent": "org", "weight": 2}}
    assert TenantCohort.model_validate(body).spec.parent == "org"
    for spec in ({"parnet": "org"}, {"borrowingLimit": -1},
                 {"fairSharing": {"usageHalfLifeSeconds": 1}}):
        with pytest.raises(ValidationError):
            TenantCohort.model_validate({**body, "spec": spec})
