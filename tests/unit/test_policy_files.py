"""One schema per policy file: every documented queues or budgets file passes the resources,
`ultraplane serve` and `ultraplane simulate`, and the simulator's old format is one sentence.

The documented files are the YAML lists in docs/queues.md, docs/power.md and docs/simulator.md
(each entry a name and the fields of a spec) and the manifests there and in examples/queues/ and
examples/power/ (TenantQueue and PowerBudget objects; a queues file's TenantCohorts with them). The replay runs on 64 Trn3 Gen2
UltraServers, 16 per network block, so the docs' `block-003` holds gen2-0048 .. gen2-0063:

    block-000: gen2-0000 .. gen2-0015   ...   block-003: gen2-0048 .. gen2-0063
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel
from ultraplane.api.settings import Settings

from ultraplane.cli import main
from ultraplane.policies.budgetdocuments import budget_file
from ultraplane.policies.cohortdocuments import cohort_file, is_cohort_entry
from ultraplane.policies.policyfiles import named_specs, read_documents
from ultraplane.policies.queuedocuments import queue_file
from ultraplane.resources.budgets import PowerBudget
from ultraplane.resources.commons import API_VERSION
from ultraplane.resources.tenantcohorts import TenantCohort
from ultraplane.resources.tenantqueues import TenantQueue

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/queues.md", "docs/power.md", "docs/simulator.md")
MODELS: dict[str, type[BaseModel]] = {"TenantQueue": TenantQueue, "PowerBudget": PowerBudget}
# kind -> (the serve setting, the simulate flag)
FLAGS = {"TenantQueue": ("queues", "--queues"), "PowerBudget": ("power_budgets", "--power-budget")}


def _kind(data: Any) -> str | None:
    """The kind of a policy file's content: TenantQueue, PowerBudget, or None (no policy)."""
    entries = data if isinstance(data, list) else [data]
    if not entries or not all(isinstance(e, dict) for e in entries):
        return None
    if all(e.get("kind") in MODELS or is_cohort_entry(e) for e in entries):
        kinds = {e["kind"] for e in entries if not is_cohort_entry(e)}
        return kinds.pop() if len(kinds) == 1 else None
    if all("name" in e and "nominal" in e for e in entries):
        return "TenantQueue"
    if all("name" in e and "watts" in e for e in entries):
        return "PowerBudget"
    return None


def documented() -> list[Any]:
    cases = []
    for doc in DOCS:
        blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / doc).read_text(), flags=re.S)
        for i, text in enumerate(blocks):
            documents = list(yaml.safe_load_all(text))
            data = documents[0] if len(documents) == 1 else documents
            # a lone manifest in the prose (its parent elsewhere) is checked by test_resources
            if isinstance(data, list) and (kind := _kind(data)) is not None:
                cases.append(pytest.param(kind, text, id=f"{doc}#{i}"))
    for folder in ("queues", "power"):
        for path in sorted((ROOT / "examples" / folder).glob("*.yaml")):
            kind = _kind(read_documents(path))
            assert kind is not None, path
            cases.append(pytest.param(kind, path.read_text(), id=f"examples/{folder}/{path.name}"))
    return cases


def test_the_docs_and_examples_hold_both_kinds_of_policy_file() -> None:
    kinds = [case.values[0] for case in documented()]
    assert kinds.count("TenantQueue") >= 2 and kinds.count("PowerBudget") >= 2


@pytest.mark.parametrize(("kind", "text"), documented())
def test_a_documented_policy_file_passes_the_resources_serve_and_the_simulator(
        tmp_path: Path, kind: str, text: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    data = read_documents(path)
    data = data if isinstance(data, list) else [data]
    entries = named_specs([e for e in data if not is_cohort_entry(e)], kind, "entry", ValueError)
    for name, spec in entries:  # the resources: each entry as the object kubectl applies
        MODELS[kind].model_validate({"apiVersion": API_VERSION, "kind": kind,
                                     "metadata": {"name": name}, "spec": spec})
    read = queue_file(path) if kind == "TenantQueue" else budget_file(path)
    assert [s.name for s in read] == [name for name, _ in entries]
    for entry in filter(is_cohort_entry, data):  # a queues file's cohorts, as objects
        TenantCohort.model_validate(entry)
    assert len(cohort_file(path)) == sum(map(is_cohort_entry, data))
    setting, flag = FLAGS[kind]
    Settings(db=f"sqlite:///{tmp_path / 'serve.db'}", **{setting: str(path)})  # serve
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,0,100,8\n")
    got = CliRunner().invoke(main, ["simulate", "--fleet", "trn3-gen2:64", "--trace", str(trace),
                                    "--out", str(tmp_path / "out"), "--policy", "ultraplane",
                                    "--no-progress", flag, str(path)])
    assert got.exit_code == 0, got.output


@pytest.mark.parametrize(("setting", "text", "says"), [
    ("queues", "- {name: a, nominal: 144}\n", "nominal must map each hardware profile"),
    ("power_budgets", "budgets:\n  - {name: a, watts: 1}\n", "without the `budgets:` key"),
    ("power_budgets", "- {name: a, watts: 1, ultraservers: [x]}\n", "ultraServers: {names:"),
    ("power_budgets", "- {name: a, watts: 1, labels: {row: '3'}}\n", "{matchLabels: ...}"),
])
def test_the_simulators_old_format_is_one_sentence_for_serve_too(
        tmp_path: Path, setting: str, text: str, says: str) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(says)):
        Settings(db=f"sqlite:///{tmp_path / 'x.db'}", **{setting: str(path)})


def test_an_object_of_another_kind_or_version_is_named(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("apiVersion: ultraplane.dev/v1alpha1\nkind: PowerBudget\n"
                    "metadata: {name: hall}\nspec: {watts: 1000}\n---\n"
                    "apiVersion: ultraplane.dev/v1alpha1\nkind: TenantQueue\n"
                    "metadata: {name: a}\nspec: {nominal: {trn3-gen2: 4}}\n")
    with pytest.raises(ValueError, match="queue 1: a 'PowerBudget' object, not a TenantQueue"):
        queue_file(path)
    path.write_text("- apiVersion: v1\n  kind: TenantQueue\n  metadata: {name: a}\n"
                    "  spec: {nominal: {trn3-gen2: 4}}\n")
    with pytest.raises(ValueError, match=re.escape("apiVersion must be ultraplane.dev/v1alpha1")):
        queue_file(path)
