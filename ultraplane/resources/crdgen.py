"""Render the CustomResourceDefinitions (and the API reference) from the pydantic models.

    python -m ultraplane.resources.crdgen --out crds/ --docs docs/api-reference.md

The models are the one source: a unit test regenerates and compares with the committed
files, so the CRDs, the REST schemas and the docs cannot drift apart.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import BaseModel

from ultraplane.resources import podtemplates
from ultraplane.resources.commons import GROUP, VERSION
from ultraplane.resources.inferencejobs import InferenceJob, InferenceJobSpec, InferenceJobStatus
from ultraplane.resources.schemas import structural
from ultraplane.resources.trainingjobs import TrainingJob, TrainingJobSpec, TrainingJobStatus
from ultraplane.resources.ultraservers import UltraServer, UltraServerSpec, UltraServerStatus

CATEGORY = "ultraplane"


@dataclass(frozen=True)
class Kind:
    """One custom resource kind and how `kubectl get` shows it."""

    kind: str
    plural: str
    short: str
    scope: str
    root: type[BaseModel]
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[tuple[str, str, str, str], ...]  # name, type, jsonPath, description

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


_AGE = ("Age", "date", ".metadata.creationTimestamp", "Time since creation.")

KINDS: tuple[Kind, ...] = (
    Kind(
        "UltraServer",
        "ultraservers",
        "us",
        "Cluster",
        UltraServer,
        UltraServerSpec,
        UltraServerStatus,
        (
            ("Profile", "string", ".spec.profile", "Hardware profile."),
            ("Chips", "integer", ".status.capacity.chips", "Healthy chips."),
            ("Free", "integer", ".status.free.chips", "Free healthy chips."),
            ("Utilization", "number", ".status.utilization", "Fraction of chips allocated."),
            ("Power", "number", ".status.powerWatts", "Power draw in watts."),
            ("Schedulable", "boolean", ".spec.schedulable", "Open to new placements."),
            ("Reserved", "string", ".status.reservedFor",
             "Waiting job this UltraServer is held back for (backfill reservation)."),
            _AGE,
        ),
    ),
    Kind(
        "TrainingJob",
        "trainingjobs",
        "tj",
        "Namespaced",
        TrainingJob,
        TrainingJobSpec,
        TrainingJobStatus,
        (
            ("Phase", "string", ".status.phase", "Lifecycle phase."),
            ("Chips", "integer", ".spec.chips", "Chips of the gang."),
            (
                "UltraServers",
                "string",
                ".status.allocation.ultraServers",
                "UltraServers holding the chips.",
            ),
            ("Progress", "number", ".status.progressPercent", "Work done, percent."),
            _AGE,
        ),
    ),
    Kind(
        "InferenceJob",
        "inferencejobs",
        "ij",
        "Namespaced",
        InferenceJob,
        InferenceJobSpec,
        InferenceJobStatus,
        (
            ("Phase", "string", ".status.phase", "Lifecycle phase."),
            ("Replicas", "integer", ".spec.replicas", "Model replicas."),
            ("Chips", "integer", ".spec.chipsPerReplica", "Chips per replica."),
            ("Tokens/s", "number", ".status.tokensPerSecond", "Output tokens per second."),
            _AGE,
        ),
    ),
)


def root_schema(k: Kind) -> dict[str, Any]:
    """The openAPIV3Schema of a kind: apiVersion/kind/metadata plus spec and status."""
    root: dict[str, Any] = {
        "type": "object",
        "description": (k.root.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "ultraplane.dev/v1alpha1"},
            "kind": {"type": "string", "description": k.kind},
            "metadata": {"type": "object"},
            "spec": structural(k.spec),
            "status": structural(k.status, defaults=False),
        },
    }
    spec_fields = root["properties"]["spec"]["properties"]
    if "template" in spec_fields:  # Kubernetes' PodTemplateSpec, not pydantic's free object
        spec_fields["template"] = podtemplates.crd_schema()
    extra = k.root.model_config.get("json_schema_extra")
    if isinstance(extra, dict) and "x-kubernetes-validations" in extra:
        root["x-kubernetes-validations"] = extra["x-kubernetes-validations"]
    return root


def crd(k: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition object of a kind."""
    columns = [{"name": n, "type": t, "jsonPath": p, "description": d} for n, t, p, d in k.columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": k.name},
        "spec": {
            "group": GROUP,
            "scope": k.scope,
            "names": {
                "kind": k.kind,
                "listKind": f"{k.kind}List",
                "plural": k.plural,
                "singular": k.kind.lower(),
                "shortNames": [k.short],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root_schema(k)},
                }
            ],
        },
    }


def render(k: Kind) -> str:
    header = (
        "# Generated by `python -m ultraplane.resources.crdgen` from ultraplane/resources.\n"
        "# Do not edit: change the pydantic models and regenerate.\n"
    )
    return header + yaml.safe_dump(crd(k), sort_keys=False, width=100, allow_unicode=True)


def rendered_files() -> dict[str, str]:
    """File name -> text of every generated CRD."""
    return {f"{GROUP}_{k.plural}.yaml": render(k) for k in KINDS}


@click.command()
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default="crds")
@click.option(
    "--docs",
    "docs",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the API reference (Markdown) here.",
)
def main(out: Path, docs: Path | None) -> None:
    """Write the CRD YAML files (and optionally the API reference)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered_files().items():
        (out / name).write_text(text)
        click.echo(f"wrote {out / name}")
    if docs is not None:
        from ultraplane.resources.apidocs import render_reference

        docs.write_text(render_reference())
        click.echo(f"wrote {docs}")


if __name__ == "__main__":
    sys.exit(main())
