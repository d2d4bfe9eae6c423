# Go builds shared by hack/envtest.sh and hack/kind-cluster.sh (sourced, not run).
#
# This machine reaches the Go module proxy but no release download site, so Kubernetes and its
# friends are built from their modules. k8s.io/kubernetes cannot be `go install`ed (its go.mod
# replaces every k8s.io staging module with a local path), so it is built inside a throwaway
# module that pins each staging module to the matching v0.x release; the replace list is read
# from k8s.io/kubernetes' own go.mod, so a new release that adds a staging module needs no edit.
#
# Callers set GO_BUILDS_LOG (a function name that logs a line to stderr) or get `echo >&2`.

GO_BUILDS_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Go 1.26 is installed; the modules ask for a newer toolchain, fetched from the proxy.
if [[ "${GOTOOLCHAIN:-}" == "" || "${GOTOOLCHAIN:-}" == "local" ]]; then
    export GOTOOLCHAIN="${ULTRAPLANE_GOTOOLCHAIN:-go1.27.3}"
fi
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

go_builds_log() { if [[ -n "${GO_BUILDS_LOG:-}" ]]; then "$GO_BUILDS_LOG" "$*"; else echo "$*" >&2; fi; }

go_builds_need_go() {
    if ! command -v go >/dev/null 2>&1; then
        go_builds_log "Go is not installed: it is needed to build $1 (Debian: apt-get install golang, or go.dev/dl)."
        exit 3
    fi
}

# go_module DIR MODULE VERSION: a throwaway module in DIR that requires MODULE@VERSION.
go_module() {
    local dir="$1" mod="$2" version="$3"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$GO_BUILDS_HERE/../envtest/go.mod.tmpl" "$dir/go.mod"
    (cd "$dir" && go mod edit -require="$mod@$version")
}

# k8s_ldflags VERSION: the version stamps `kubectl version` and the servers report.
k8s_ldflags() {
    local version="$1" major minor date ld="-s -w"
    major="${version#v}"; major="${major%%.*}"
    minor="${version#v*.}"; minor="${minor%%.*}"
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    echo "$ld"
}

# k8s_build WORKDIR VERSION OUTDIR CMD...: builds k8s.io/kubernetes/cmd/CMD for each CMD into
# OUTDIR (all in one `go build`, so the packages they share compile once).
k8s_build() {
    local work="$1" version="$2" out="$3"; shift 3
    local staging_version="v0.${version#v1.}" gomod staging m pkgs=() args=()
    go_builds_need_go "Kubernetes $version ($*)"
    go_builds_log "building Kubernetes $version: $* (in $work; 7-18 min cold, seconds when cached)"
    go_module "$work" k8s.io/kubernetes "$version"
    gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" \
        | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
    staging="$(sed -n 's#^\s*\(k8s.io/[A-Za-z0-9._/-]*\) => \./staging/.*#\1#p' "$gomod")"
    if [[ -z "$staging" ]]; then
        go_builds_log "found no staging replace lines in $gomod"
        return 1
    fi
    for m in $staging; do args+=("-replace=$m=$m@$staging_version"); done
    (cd "$work" && go mod edit "${args[@]}")
    for m in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$m"); done
    (cd "$work" && nice go get "${pkgs[@]/%/@$version}" >&2) || return 1
    mkdir -p "$out.tmp"
    (cd "$work" && nice go build -trimpath -ldflags "$(k8s_ldflags "$version")" -o "$out.tmp/" "${pkgs[@]}") \
        || return 1
    mkdir -p "$out"
    for m in "$@"; do mv "$out.tmp/$m" "$out/$m"; done
    rmdir "$out.tmp"
}

# go_module_build WORKDIR MODULE VERSION PACKAGE OUTFILE: builds PACKAGE of MODULE@VERSION in
# a throwaway module (works for modules whose go.mod has replace lines, which `go install`
# refuses).
go_module_build() {
    local work="$1" mod="$2" version="$3" pkg="$4" out="$5"
    go_builds_need_go "$pkg $version"
    go_builds_log "building $pkg $version (in $work)"
    go_module "$work" "$mod" "$version"
    (cd "$work" && nice go get "$pkg@$version" >&2) || return 1
    (cd "$work" && nice go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg") || return 1
    mv "$out.tmp" "$out"
}

# go_source_build SRCDIR OUTFILE: builds one of this repository's own small programs.
go_source_build() {
    local src="$1" out="$2"
    go_builds_need_go "$src"
    (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" .) || return 1
    mv "$out.tmp" "$out"
}
