"""The resource models, the CRDs generated from them, the examples and the invalid corpus.

Domain sizes used below (from `ultraplane.hardware.profiles`):

    trn3-gen2 UltraServer (144 chips)          trn2 / trn3-gen1 UltraServer (64 chips)
    +-- rack 0 --------+-- rack 1 --------+    +-- rack 0 ----------------------+
    | s00 [c00..c03]   | s18 [c00..c03]   |    | s00 [c00..c15] .. s03 [..c15]  |
    | ...  18 servers  | ...  18 servers  |    +--------------------------------+
    +------------------+------------------+    server = 16, rack = ultraserver = 64
    server = 4, rack = 72, ultraserver = 144
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ultraplane.hardware import profiles, topology
from ultraplane.resources import (
    InferenceJob,
    InferenceJobSpec,
    Level,
    Precision,
    ProfileName,
    TopologyPolicy,
    TrainingJob,
    TrainingJobSpec,
    UltraServer,
    bounds,
    crdgen,
    rules,
    to_wire,
)
from ultraplane.resources.apidocs import render_reference
from ultraplane.resources.budgets import PowerBudget
from ultraplane.resources.schemas import structural, walk
from ultraplane.resources.tenantqueues import TenantQueue

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "integration" / "invalid_manifests"
ROOTS: dict[str, type[BaseModel]] = {
    "UltraServer": UltraServer,
    "TrainingJob": TrainingJob,
    "InferenceJob": InferenceJob,
    "TenantQueue": TenantQueue,
    "PowerBudget": PowerBudget,
}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _crd(plural: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "crds" / f"ultraplane.dev_{plural}.yaml").read_text())


def _schema(plural: str) -> dict[str, Any]:
    version = _crd(plural)["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


# --- one source: the committed files are exactly what the models render ---------------------


def test_committed_crds_are_regenerated_from_the_models() -> None:
    rendered = crdgen.rendered_files()
    assert sorted(rendered) == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for name, text in rendered.items():
        assert (ROOT / "crds" / name).read_text() == text, (
            f"crds/{name} is stale: run python -m ultraplane.resources.crdgen --out crds/ "
            "--docs docs/api-reference.md"
        )


def test_committed_api_reference_is_regenerated() -> None:
    assert (ROOT / "docs" / "api-reference.md").read_text() == render_reference()


# --- the schemas are structural and teach the API ---------------------------------------------


@pytest.mark.parametrize("plural", ["ultraservers", "trainingjobs", "inferencejobs"])
def test_every_field_is_typed_and_described(plural: str) -> None:
    for path, node in walk(_schema(plural)):
        if path == ".metadata":
            continue
        # Kubernetes' own int-or-string fields (quantities, ports) of the pod template
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, (
            f"{plural}{path} has no type")
        # Scalar list items and map values are not fields of their own in `kubectl explain`.
        if not (path.endswith(("[]", "{}")) and node.get("type") != "object"):
            assert node.get("description"), f"{plural}{path} has no description"
        for banned in ("$ref", "anyOf", "allOf", "oneOf", "title", "nullable", "uniqueItems"):
            assert banned not in node, f"{plural}{path} has {banned}"
        if "properties" in node:
            assert "additionalProperties" not in node, f"{plural}{path}"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node


@pytest.mark.parametrize("plural", ["ultraservers", "trainingjobs", "inferencejobs"])
def test_spec_lists_and_strings_are_bounded_for_the_cel_cost_budget(plural: str) -> None:
    for path, node in walk(_schema(plural)["properties"]["spec"], ".spec"):
        if path.startswith(".spec.template."):
            # Kubernetes' PodTemplateSpec, unbounded as in a Pod: the kube tier shows the API
            # server accepts the CRD with its rules (test_crds), i.e. within the cost budget
            continue
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path} has no maxItems"
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, f"{path} has no maxLength"


@pytest.mark.parametrize(
    ("plural", "short", "scope", "columns"),
    [
        ("ultraservers", "us", "Cluster",
         ["Profile", "Chips", "Free", "Utilization", "Power", "Schedulable", "Reserved", "Age"]),
        ("trainingjobs", "tj", "Namespaced", ["Phase", "Chips", "UltraServers", "Progress", "Age"]),
        ("inferencejobs", "ij", "Namespaced",
         ["Phase", "Replicas", "Ready", "Chips", "Chips/Replica", "Tokens/s", "Age"]),
    ],
)  # fmt: skip
def test_names_columns_and_status_subresource(
    plural: str, short: str, scope: str, columns: list[str]
) -> None:
    crd = _crd(plural)
    assert crd["metadata"]["name"] == f"{plural}.ultraplane.dev"
    assert crd["spec"]["scope"] == scope
    assert crd["spec"]["names"]["shortNames"] == [short]
    assert crd["spec"]["names"]["categories"] == ["ultraplane"]
    version = crd["spec"]["versions"][0]
    scale = {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                       "labelSelectorPath": ".status.selector"}} if plural == "inferencejobs" else {}
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}, **scale}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == columns


def test_jobs_carry_the_root_immutability_rule_and_ultraservers_do_not() -> None:
    for plural in ("trainingjobs", "inferencejobs"):
        (rule,) = _schema(plural)["x-kubernetes-validations"]
        assert "oldSelf.status.phase in ['Pending']" in rule["rule"]
    assert "self.spec == oldSelf.spec" in _schema("trainingjobs")["x-kubernetes-validations"][0][
        "rule"]
    # An InferenceJob's replicas stay editable (the scale subresource); every other spec
    # field is compared.
    (rule,) = _schema("inferencejobs")["x-kubernetes-validations"]
    spec_fields = set(_schema("inferencejobs")["properties"]["spec"]["properties"])
    compared = {f for f in spec_fields if f"self.spec.{f} == oldSelf.spec.{f}" in rule["rule"]}
    assert compared == spec_fields - {"replicas"}
    assert "x-kubernetes-validations" not in _schema("ultraservers")


def test_status_schemas_have_no_defaults() -> None:
    for plural in ("ultraservers", "trainingjobs", "inferencejobs"):
        for path, node in walk(_schema(plural)["properties"]["status"], ".status"):
            assert "default" not in node, f"{plural}{path} would be invented by the server"


# The contract of docs/resources.md: other components code against these exact paths.
CONTRACT = {
    "ultraservers": [
        ".spec.profile", ".spec.servers", ".spec.network", ".spec.racks", ".spec.schedulable",
        ".spec.failedChips", ".spec.cordonedServers", ".spec.drainPolicy",
        ".status.capacity.chips", ".status.capacity.servers", ".status.capacity.racks",
        ".status.allocated.chips", ".status.allocated.servers", ".status.free.chips",
        ".status.free.wholeServers", ".status.free.wholeRacks", ".status.free.wholeUltraServer",
        ".status.utilization", ".status.powerWatts", ".status.energyKWh", ".status.chips[].id",
        ".status.chips[].job", ".status.chips[].utilization", ".status.chips[].powerWatts",
        ".status.chips[].failed", ".status.jobs", ".status.heartbeatTime", ".status.conditions",
    ],
    "trainingjobs": [
        ".spec.chips", ".spec.profile", ".spec.topology.requiredLevel",
        ".spec.topology.preferredLevel", ".spec.topology.wholeServers", ".spec.priority",
        ".spec.precision", ".spec.model.name", ".spec.model.parametersBillions",
        ".spec.work.steps", ".spec.work.tokensPerStep", ".spec.work.durationSeconds",
        ".spec.checkpointIntervalSeconds", ".spec.failurePolicy", ".status.phase",
        ".status.queuePosition", ".status.reason", ".status.message",
        ".status.allocation.ultraServers", ".status.allocation.servers",
        ".status.allocation.chips", ".status.allocation.level", ".status.allocation.score",
        ".status.admittedTime", ".status.attempt", ".status.preemptions", ".status.restarts",
        ".status.conditions[].type", ".status.observedGeneration", ".status.startTime",
        ".status.completionTime", ".status.progress.completedSteps",
        ".status.progress.checkpointedSteps", ".status.progress.percent",
        ".status.progressPercent", ".status.utilization", ".status.powerWatts",
        ".status.energyKWh",
    ],
    "inferencejobs": [
        ".spec.replicas", ".spec.chipsPerReplica", ".spec.profile", ".spec.topology",
        ".spec.priority", ".spec.precision", ".spec.model.name",
        ".spec.model.parametersBillions", ".spec.load.requestsPerSecond",
        ".spec.load.tokensPerSecond", ".spec.latencySLO.timeToFirstTokenMs",
        ".spec.latencySLO.timePerOutputTokenMs", ".spec.durationSeconds", ".status.phase",
        ".status.allocation.replicas[].index", ".status.allocation.replicas[].ultraServers",
        ".status.allocation.replicas[].servers", ".status.allocation.replicas[].chips",
        ".status.tokensPerSecond", ".status.p50LatencyMs", ".status.sloMet",
        ".status.tokensPerMegawatt",
    ],
}  # fmt: skip


@pytest.mark.parametrize("plural", sorted(CONTRACT))
def test_contract_field_names_exist(plural: str) -> None:
    paths = {path for path, _ in walk(_schema(plural))}
    missing = [p for p in CONTRACT[plural] if p not in paths]
    assert not missing, f"{plural} lacks contract fields {missing} (docs/resources.md)"


# --- defaults: the CRD and the models agree ------------------------------------------------


@pytest.mark.parametrize(
    ("model", "plural", "fields"),
    [
        (TrainingJobSpec, "trainingjobs",
         {"priority": 0, "precision": "BF16", "checkpointIntervalSeconds": 600,
          "failurePolicy": "RestartAll", "preemptible": True, "topology": {}}),
        (InferenceJobSpec, "inferencejobs",
         {"replicas": 1, "priority": 0, "precision": "BF16", "preemptible": True,
          "topology": {}}),
    ],
)  # fmt: skip
def test_schema_defaults_match_model_defaults(
    model: type[BaseModel], plural: str, fields: dict[str, Any]
) -> None:
    props = _schema(plural)["properties"]["spec"]["properties"]
    assert {name: props[name].get("default") for name in fields} == fields
    minimal = {"chips": 4, "work": {"durationSeconds": 60}}
    if model is InferenceJobSpec:
        minimal = {"chipsPerReplica": 4, "model": {"name": "m"}, "load": {"tokensPerSecond": 1}}
    wire = to_wire(model.model_validate(minimal))
    for name, value in fields.items():
        if name == "topology":
            assert wire["topology"] == {"wholeServers": False}
        else:
            assert wire[name] == value


# --- enums agree with the core -----------------------------------------------------------


def test_enums_agree_with_the_core() -> None:
    assert [p.value for p in ProfileName] == profiles.profile_names()
    assert [p.value for p in Precision] == [p.value for p in profiles.Precision]
    ranks = [topology.parse_level(level.value) for level in Level]
    assert ranks == sorted(ranks), "Level must list levels nearest first"
    for level in Level:
        assert rules_rank(level.value) == rules_rank(str(topology.parse_level(level.value)))


def rules_rank(level: str) -> int:
    from ultraplane.resources.commons import LEVEL_RANK

    return LEVEL_RANK[level]


# --- examples are valid --------------------------------------------------------------------


# Every examples/*.yaml is a manifest: `kubectl apply -f examples/` applies them all
# (`--cluster` files live in examples/clusters/, which kubectl does not descend into).
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# Cluster-wide policy (queues, budgets) sits in folders of its own, applied on purpose.
POLICY_EXAMPLES = sorted((ROOT / "examples").glob("*/*.yaml"))


def test_kubectl_apply_f_examples_sees_only_ultraplane_manifests() -> None:
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert str(doc.get("apiVersion", "")).startswith("ultraplane.dev/"), path.name
                assert doc.get("kind") in ("UltraServer", "TrainingJob", "InferenceJob"), path.name


def test_the_four_required_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "fleet-gen2.yaml",
        "trainingjob-small.yaml",
        "trainingjob-multi-ultraserver.yaml",
        "inferencejob.yaml",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_with_the_models(path: Path) -> None:
    docs = _docs(path)
    assert docs
    for doc in docs:
        ROOTS[doc["kind"]].model_validate(doc)


@pytest.mark.parametrize("path", [p for p in POLICY_EXAMPLES if p.parent.name != "clusters"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_policy_example_validates_and_reads_in_the_core(path: Path) -> None:
    from ultraplane.policies.budgetdocuments import budget_specs
    from ultraplane.policies.queuedocuments import queue_specs

    docs = _docs(path)
    kinds = {d["kind"] for d in docs}
    assert kinds in ({"TenantQueue"}, {"PowerBudget"}), path
    for doc in docs:
        ROOTS[doc["kind"]].model_validate(doc)
    entries = [{"name": d["metadata"]["name"], **d["spec"]} for d in docs]
    specs = queue_specs(entries) if kinds == {"TenantQueue"} else budget_specs(entries)
    assert [s.name for s in specs] == [d["metadata"]["name"] for d in docs]


def test_examples_describe_a_gen2_fleet_and_a_two_ultraserver_job() -> None:
    fleet = [UltraServer.model_validate(d) for d in _docs(ROOT / "examples/fleet-gen2.yaml")]
    assert len(fleet) >= 4 and {u.spec.profile for u in fleet} == {ProfileName.TRN3_GEN2}
    (big,) = _docs(ROOT / "examples/trainingjob-multi-ultraserver.yaml")
    assert TrainingJob.model_validate(big).spec.chips == 2 * 144


# --- the invalid corpus: every manifest is rejected by the models too -----------------------


def corpus() -> list[tuple[Path, str, str]]:
    cases = []
    for path in sorted(CORPUS.glob("*.yaml")):
        head = dict(
            line[2:].split(": ", 1)
            for line in path.read_text().splitlines()
            if line.startswith("# ")
        )
        cases.append((path, head["expect"], head["pydantic"]))
    return cases


def test_corpus_has_at_least_25_cases_each_with_an_expected_message() -> None:
    cases = corpus()
    assert len(cases) >= 25
    assert all(expect.strip() and pyd.strip() for _, expect, pyd in cases)


@pytest.mark.parametrize(("path", "expect", "pyd"), corpus(), ids=lambda v: getattr(v, "stem", ""))
def test_invalid_manifest_is_rejected_by_the_models(path: Path, expect: str, pyd: str) -> None:
    (doc,) = _docs(path)
    with pytest.raises(ValidationError) as err:
        ROOTS[doc["kind"]].model_validate(doc)
    assert pyd in str(err.value)


# --- the Python twins of the CEL rules --------------------------------------------------------


@pytest.mark.parametrize(
    ("chips", "profile", "level", "whole", "error"),
    [
        # Gen2: server 4 | rack 72 | ultraserver 144
        (4, "trn3-gen2", "server", False, None),
        (5, "trn3-gen2", "server", False, "cannot fit in one server of profile trn3-gen2"),
        (72, "trn3-gen2", "rack", False, None),
        (73, "trn3-gen2", "rack", False, "which holds at most 72 chips"),
        (144, "trn3-gen2", "ultraserver", False, None),
        (288, "trn3-gen2", "network-1", True, None),
        (6, "trn3-gen2", None, True, "must be a multiple of 4"),
        # trn2: server 16 | ultraserver 64
        (16, "trn2", "server", True, None),
        (64, "trn2", "ultraserver", False, None),
        (65, "trn2", "ultraserver", False, "at most 64 chips"),
        # no profile: the largest domain of any profile bounds the request
        (145, None, "ultraserver", False, "of any profile, which holds at most 144"),
        (6, None, None, True, None),
    ],
)  # fmt: skip
def test_check_fit(
    chips: int, profile: str | None, level: str | None, whole: bool, error: str | None
) -> None:
    policy = TopologyPolicy(required_level=level, whole_servers=whole)
    prof = ProfileName(profile) if profile else None
    if error is None:
        rules.check_fit(chips, "chips", prof, policy)
    else:
        with pytest.raises(ValueError, match=error):
            rules.check_fit(chips, "chips", prof, policy)


def test_cel_maps_carry_the_profile_sizes() -> None:
    schema = _schema("trainingjobs")
    *fits, whole, _steps = schema["properties"]["spec"]["x-kubernetes-validations"]
    assert len(fits) == len(rules.FIT_LEVELS)
    for level, fit in zip(rules.FIT_LEVELS, fits, strict=True):
        assert bounds.cel_level_chips(level) in fit["rule"]
        assert f"self.topology.requiredLevel != '{level}'" in fit["rule"]
    assert "'trn3-gen2': 144" in bounds.cel_level_chips("ultraserver")
    assert "'trn3-gen2': 4" in whole["rule"]


def test_message_expressions_never_stringify_numbers() -> None:
    # The API server's cost estimate treats string(int) as unbounded and rejects the CRD.
    for plural in ("ultraservers", "trainingjobs", "inferencejobs"):
        for path, node in walk(_schema(plural)):
            for rule in node.get("x-kubernetes-validations", []):
                assert "string(" not in rule.get("messageExpression", ""), f"{plural}{path}"


@given(
    chips=st.integers(1, 400),
    profile=st.sampled_from([None, *ProfileName]),
    level=st.sampled_from([None, *Level]),
    whole=st.booleans(),
)
def test_check_fit_accepts_exactly_what_fits(
    chips: int, profile: ProfileName | None, level: Level | None, whole: bool
) -> None:
    sizes = bounds.profile_sizes()
    names = [profile.value] if profile else list(sizes)
    size = {
        "server": lambda n: sizes[n].chips_per_server,
        "rack": lambda n: sizes[n].chips_per_rack,
        "ultraserver": lambda n: sizes[n].chips_per_ultraserver,
    }
    fits = (
        level is None
        or level.value not in size
        or chips <= max(size[level.value](n) for n in names)
    )
    fits = fits and not (whole and profile and chips % sizes[profile.value].chips_per_server)
    policy = TopologyPolicy(required_level=level, whole_servers=whole)
    try:
        rules.check_fit(chips, "chips", profile, policy)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == bool(fits)


@given(
    chips=st.integers(1, 64),
    priority=st.integers(-1_000_000, 1_000_000),
    steps=st.one_of(st.none(), st.integers(1, 10**6)),
    precision=st.sampled_from(list(Precision)),
)
def test_wire_round_trip(
    chips: int, priority: int, steps: int | None, precision: Precision
) -> None:
    work = {"steps": steps, "tokensPerStep": 1024} if steps else {"durationSeconds": 60}
    spec = TrainingJobSpec.model_validate(
        {"chips": chips, "priority": priority, "precision": precision, "work": work,
         "model": {"name": "m", "parametersBillions": 1.5}}
    )  # fmt: skip
    wire = to_wire(spec)
    assert "chips" in wire and "checkpointIntervalSeconds" in wire and "tokens_per_step" not in wire
    assert TrainingJobSpec.model_validate(wire) == spec


# --- the schema rewriter -------------------------------------------------------------------


class _Sample(BaseModel):
    """A sample."""

    ratio: float | None = None
    level: Level | None = None


def test_structural_collapses_optionals_and_inlines_refs() -> None:
    from pydantic import Field

    class Wrapped(BaseModel):
        """Outer."""

        inner: _Sample = Field(description="The field's own words win.")
        positive: float = Field(gt=0, description="Strictly positive.")

    schema = structural(Wrapped)
    inner = schema["properties"]["inner"]
    assert inner["description"] == "The field's own words win."
    assert inner["properties"]["level"]["type"] == "string"
    assert (
        "anyOf" not in inner["properties"]["ratio"]
        and "default" not in inner["properties"]["ratio"]
    )
    assert schema["properties"]["positive"] == {
        "type": "number", "description": "Strictly positive.", "exclusiveMinimum": True,
        "minimum": 0,
    }  # fmt: skip


def test_structural_refuses_a_real_union() -> None:
    class Bad(BaseModel):
        either: int | str

    with pytest.raises(ValueError, match="structural"):
        structural(Bad)


def test_crdgen_command_writes_the_files(tmp_path: Path) -> None:
    from click.testing import CliRunner

    docs = tmp_path / "api-reference.md"
    result = CliRunner().invoke(crdgen.main, ["--out", str(tmp_path / "crds"), "--docs", str(docs)])
    assert result.exit_code == 0, result.output
    for name, text in crdgen.rendered_files().items():
        assert (tmp_path / "crds" / name).read_text() == text
    assert docs.read_text() == render_reference()
    clash = tmp_path / "a-file"
    clash.write_text("")
    assert CliRunner().invoke(crdgen.main, ["--out", str(clash)]).exit_code == 2


def test_a_boolean_is_no_number_in_any_spec() -> None:
    """Pydantic's lax mode reads true/false as 1/0; the CRD schema refuses them, so the models
    do too (schemathesis found `"checkpointIntervalSeconds": false` created with 0)."""
    from ultraplane.resources.inferencejobs import InferenceJobSpec
    from ultraplane.resources.trainingjobs import TrainingJobSpec

    base = {"chips": 4, "work": {"durationSeconds": 60}}
    for field, value in (("checkpointIntervalSeconds", False), ("chips", True),
                         ("priority", True)):
        try:
            TrainingJobSpec.model_validate({**base, field: value})
        except ValidationError as exc:
            assert field in str(exc) and "boolean" in str(exc)
        else:
            raise AssertionError(f"{field}: {value} accepted")
    try:  # nested models too
        InferenceJobSpec.model_validate({"chipsPerReplica": 4, "load": {"requestsPerSecond": True}})
    except ValidationError as exc:
        assert "requestsPerSecond" in str(exc) and "boolean" in str(exc)
    else:
        raise AssertionError("requestsPerSecond: true accepted")
    # a boolean field still takes booleans
    assert TrainingJobSpec.model_validate({**base, "preemptible": False}).preemptible is False


def test_an_autoscaled_inference_job_needs_no_load_and_a_fixed_one_does() -> None:
    autoscaling = {"maxReplicas": 2,
                   "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 100}}
    spec = InferenceJobSpec.model_validate({"chipsPerReplica": 4, "model": {"name": "m"},
                                            "autoscaling": autoscaling})
    assert spec.load is None and "load" not in to_wire(spec)
    with pytest.raises(ValidationError, match=r"spec\.load is required unless spec\.autoscaling"):
        InferenceJobSpec.model_validate({"chipsPerReplica": 4, "model": {"name": "m"}})
