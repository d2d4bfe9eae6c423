#!/usr/bin/env bash
# Copy the generated CRDs from crds/ (the one source) into the Helm chart's crds/ folder.
#
# Helm installs everything in a chart's crds/ before the templates, and never templates
# them, so they must be plain copies. tests/integration/test_helm.py fails when the two
# folders differ: after regenerating crds/, run this script and commit both.
#
# Usage: hack/sync-chart-crds.sh          copy (and remove chart CRDs that no longer exist)
#        hack/sync-chart-crds.sh --check  exit 1 and name the files if they differ
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/crds"
DST="$ROOT/helm/ultraplane/crds"

shopt -s nullglob
sources=("$SRC"/*.yaml)
if (( ${#sources[@]} == 0 )); then
    echo "sync-chart-crds: no CRD YAML in $SRC; generate them first (python -m ultraplane.resources.crdgen)." >&2
    exit 1
fi

if [[ "${1:-}" == "--check" ]]; then
    bad=0
    for f in "${sources[@]}"; do
        if ! cmp -s "$f" "$DST/$(basename "$f")"; then
            echo "differs or missing in the chart: $(basename "$f")" >&2; bad=1
        fi
    done
    for f in "$DST"/*.yaml; do
        if [[ ! -e "$SRC/$(basename "$f")" ]]; then
            echo "only in the chart: $(basename "$f")" >&2; bad=1
        fi
    done
    if (( bad )); then
        echo "sync-chart-crds: helm/ultraplane/crds/ differs from crds/; run hack/sync-chart-crds.sh." >&2
        exit 1
    fi
    echo "sync-chart-crds: chart CRDs match crds/."
    exit 0
fi

mkdir -p "$DST"
for stale in "$DST"/*.yaml; do
    [[ -e "$SRC/$(basename "$stale")" ]] || rm -f "$stale"
done
cp "${sources[@]}" "$DST/"
echo "sync-chart-crds: copied ${#sources[@]} CRD file(s) into helm/ultraplane/crds/."
