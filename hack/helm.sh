#!/usr/bin/env bash
# Build a real helm binary from the Go module proxy, once, and print its path.
#
# Why build instead of download: CI and developer machines reach the Go module proxy but not
# GitHub release assets, and a pinned module version is reproducible. The binary is cached per
# version, so the second call costs nothing. The build runs under `nice` because the machine is
# shared (2 cores).
#
# Usage: hack/helm.sh            -> prints /path/to/helm (builds it first if needed)
#        HELM_VERSION=v4.3.2 hack/helm.sh
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.2}"
case "$HELM_VERSION" in
    v3.*) HELM_MODULE="helm.sh/helm/v3" ;;
    v4.*) HELM_MODULE="helm.sh/helm/v4" ;;
    *) echo "hack/helm.sh: HELM_VERSION must look like v4.x.y or v3.x.y, got '$HELM_VERSION'." >&2; exit 2 ;;
esac

CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ultraplane/helm/${HELM_VERSION}"
HELM_BIN="${CACHE_DIR}/helm"

if [[ -x "$HELM_BIN" ]] && "$HELM_BIN" version --short >/dev/null 2>&1; then
    echo "$HELM_BIN"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "hack/helm.sh: Go is needed to build helm ${HELM_VERSION}; install Go 1.26 or newer." >&2
    exit 1
fi

mkdir -p "$CACHE_DIR"
# Build into a temporary dir and move into place, so an interrupted build never leaves a
# half-written binary that the fast path above would trust.
TMP_BIN="$(mktemp -d "${CACHE_DIR}/build.XXXXXX")"
trap 'rm -rf "$TMP_BIN"' EXIT

build() {
    GOBIN="$TMP_BIN" GOFLAGS=-mod=mod CGO_ENABLED=0 \
        nice -n 10 go install "${HELM_MODULE}/cmd/helm@${HELM_VERSION}" >&2
}
if ! build; then
    # The module may require a newer Go than the one installed; the toolchain comes from the
    # same module proxy.
    echo "hack/helm.sh: retrying with GOTOOLCHAIN=go1.27.3" >&2
    GOTOOLCHAIN=go1.27.3 build
fi

mv -f "$TMP_BIN/helm" "$HELM_BIN"
echo "$HELM_BIN"
