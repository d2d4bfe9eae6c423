"""Writes ultraplane/resources/podtemplate.json: Kubernetes' own PodTemplateSpec schema, structural.

    python hack/podtemplate_schema.py [path/to/api__v1_openapi.json]

Why vendored and generated: the job CRDs embed a pod template, and `kubectl explain
trainingjob.spec.template.spec.containers` should answer what it answers for a Pod. The source
is the OpenAPI v3 document Kubernetes publishes (`api/openapi-spec/v3/api__v1_openapi.json` of
k8s.io/kubernetes, the version `hack/envtest.sh` builds; found in the Go module cache, or pass
its path). A CRD schema must be structural, so this script resolves every `$ref`, writes the
int-or-string types (Quantity, IntOrString) the way CRDs spell them, drops server-side defaults
(the API server defaults the Pod when the operator creates it), list-map and patch markers
(a CRD list-map needs its keys required or defaulted) and `template.metadata` down to the labels
and annotations a template may carry. Descriptions are kept word for word.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VERSION = "v1.37.2"
DEFAULT_SOURCE = (Path.home() / "go/pkg/mod/k8s.io" / f"kubernetes@{VERSION}"
                  / "api/openapi-spec/v3/api__v1_openapi.json")
OUT = Path(__file__).resolve().parents[1] / "ultraplane" / "resources" / "podtemplate.json"
PREFIX = "#/components/schemas/"
INT_OR_STRING = ("io.k8s.apimachinery.pkg.api.resource.Quantity",
                 "io.k8s.apimachinery.pkg.util.intstr.IntOrString")
DROP = {"default", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy", "x-kubernetes-map-type",
        "x-kubernetes-unions"}


def convert(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    node = dict(node)
    ref = None
    if "$ref" in node:
        ref = node.pop("$ref")
    elif len(node.get("allOf") or []) == 1 and "$ref" in node["allOf"][0]:
        ref = node.pop("allOf")[0]["$ref"]
    if ref is not None:
        name = ref.removeprefix(PREFIX)
        if name in seen:
            raise ValueError(f"recursive schema at {name}: not expressible in a CRD")
        if name in INT_OR_STRING:
            # structural: no type, no anyOf needed beside the marker
            target = {"description": defs[name].get("description", ""),
                      "x-kubernetes-int-or-string": True}
        else:
            target = convert(defs[name], defs, (*seen, name))
        # the field's own description beats the referenced type's
        node = {**target, **{k: v for k, v in node.items() if k == "description"}}
        return {k: v for k, v in node.items() if k not in DROP}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP:
            continue
        if key == "properties":
            out[key] = {k: convert(v, defs, seen) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = convert(value, defs, seen)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def pod_template(source: Path) -> dict[str, Any]:
    defs = json.loads(source.read_text())["components"]["schemas"]
    schema = convert(defs["io.k8s.api.core.v1.PodTemplateSpec"], defs)
    meta = schema["properties"]["metadata"]
    schema["properties"]["metadata"] = {
        "type": "object",
        "description": meta["description"] + " Only labels and annotations are used; the "
        "operator names the pods.",
        "properties": {k: meta["properties"][k] for k in ("labels", "annotations")},
    }
    schema["x-ultraplane-source"] = f"k8s.io/kubernetes@{VERSION} api/openapi-spec/v3/api__v1_openapi.json"
    return schema


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SOURCE
    if not source.is_file():
        print(f"{source} not found: pass the path of Kubernetes' api__v1_openapi.json", file=sys.stderr)
        return 2
    OUT.write_text(json.dumps(pod_template(source), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
