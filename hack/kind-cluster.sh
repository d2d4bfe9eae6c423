#!/usr/bin/env bash
# A local multi-node kind cluster with Ultraplane's image loaded, on a laptop or on a machine
# that reaches no container registry at all.
#
# Usage: hack/kind-cluster.sh [up|down|image|node-image|tools|status]
#   up          (default) everything below, then create the cluster (reused when it is
#               already up) and load the project's image into it
#   down        delete the cluster
#   image       build the project's image only (prints its tag)
#   node-image  build the kind node image only (prints its tag)
#   tools       build kind and the Kubernetes binaries only (prints the bin directory)
#   status      say what is cached and what is running
#
# What `up` does, each step only where it is needed:
#   1. Docker: uses the running engine; as root with none running, installs Debian's
#      docker.io when missing and starts dockerd (directly when there is no systemd).
#   2. Host quirks, detected: where the capability bounding set lacks a capability that
#      `--privileged` asks for, or no process may lower its oom_score_adj, a pass-through runc
#      wrapper (hack/kind/runc-shim) is installed as /usr/local/sbin/runc. Elsewhere nothing.
#   3. kind from the Go module proxy.
#   4. The node image: the stock kindest/node image when ULTRAPLANE_KIND_NODE_IMAGE names one
#      (a laptop with network); otherwise built here from Debian packages (debootstrap) and
#      Kubernetes binaries built from the Go module proxy, with every image kubeadm needs
#      inside it and a small CNI (hack/kind/node/default-cni.yaml) instead of kindnetd.
#   5. The project's image (Dockerfile, legacy builder): FROM python:3.11-slim when that image
#      is present or can be pulled, else FROM a base built here (debootstrap + python3).
#   6. `kind create cluster` with 1 control plane and ULTRAPLANE_KIND_WORKERS workers, then
#      `kind load docker-image`.
# Everything built is cached by version under ${XDG_CACHE_HOME:-~/.cache}/ultraplane/kind (and
# in Docker's image store), so a second run takes seconds. Each step's output goes to a log
# file; a failed step is named with its log, and a cluster this run created is deleted.
#
# Knobs: KIND_CLUSTER_NAME (ultraplane), ULTRAPLANE_KIND_WORKERS (2), ULTRAPLANE_IMAGE
# (ultraplane:dev), ULTRAPLANE_KIND_NODE_IMAGE (a node image to use instead of building one),
# ULTRAPLANE_PYTHON_IMAGE (python:3.11-slim), ULTRAPLANE_K8S_VERSION (v1.37.2),
# ULTRAPLANE_KIND_VERSION (v0.33.0), ULTRAPLANE_DEBIAN_MIRROR (http://deb.debian.org/debian).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
K8S_VERSION="${ULTRAPLANE_K8S_VERSION:-v1.37.2}"
KIND_VERSION="${ULTRAPLANE_KIND_VERSION:-v0.33.0}"
CRICTL_VERSION="${ULTRAPLANE_CRICTL_VERSION:-v1.37.0}"
COREDNS_VERSION="${ULTRAPLANE_COREDNS_VERSION:-v1.14.6}"
ETCD_VERSION="${ULTRAPLANE_ETCD_VERSION:-v3.7.0}"
SUITE="${ULTRAPLANE_DEBIAN_SUITE:-bookworm}"
MIRROR="${ULTRAPLANE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CLUSTER="${KIND_CLUSTER_NAME:-ultraplane}"
WORKERS="${ULTRAPLANE_KIND_WORKERS:-2}"
IMAGE="${ULTRAPLANE_IMAGE:-ultraplane:dev}"
PYTHON_IMAGE="${ULTRAPLANE_PYTHON_IMAGE:-python:3.11-slim}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/ultraplane/kind"
LOGS="$CACHE/logs"
BIN="$CACHE/bin"
# Disk a fully cold build needs (Go module and build caches, images, three running nodes).
COLD_DISK_GB=16
WARM_DISK_GB=5

log() { printf 'kind-cluster %s: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fail() { log "$*"; exit 2; }
GO_BUILDS_LOG=log
# shellcheck source=hack/lib/go-builds.sh
source "$HERE/lib/go-builds.sh"

created_cluster=0
cleanup_on_failure() {
    local rc=$?
    if (( rc != 0 && created_cluster )); then
        log "deleting the half-made cluster $CLUSTER"
        kind_bin delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    fi
}
trap cleanup_on_failure EXIT

# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log; on failure names the step and
# the log and shows its tail.
step() {
    local name="$1" start=$SECONDS; shift
    mkdir -p "$LOGS"
    log "$name ..."
    # A subshell outside any `if`/`||`, so that `set -e` holds inside the step's functions.
    local rc=0
    set +e
    ( set -e; "$@" ) >"$LOGS/$name.log" 2>&1
    rc=$?
    set -e
    if (( rc != 0 )); then
        tail -25 "$LOGS/$name.log" | sed 's/^/    /' >&2
        fail "step '$name' failed; its log is $LOGS/$name.log"
    fi
    log "$name done in $((SECONDS - start)) s"
}

kind_bin() { "$BIN/kind-$KIND_VERSION" "$@"; }

# --- 1. Docker ---------------------------------------------------------------------------

# apt_install PACKAGE...: from the package lists there are, else after refreshing them.
apt_install() {
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" \
        || { apt-get update -q && env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"; }
}

docker_up() { docker info >/dev/null 2>&1; }

start_dockerd() {
    if [[ "$(cat /proc/1/comm 2>/dev/null)" == systemd ]]; then
        systemctl start docker
    else
        # Without the lock's descriptor, or dockerd would hold the lock for its whole life.
        nohup dockerd >"$LOGS/dockerd.log" 2>&1 9>&- &
    fi
    local deadline=$((SECONDS + 60))
    until docker_up; do
        (( SECONDS < deadline )) || { echo "dockerd did not answer within 60 s"; return 1; }
        sleep 1
    done
}

ensure_docker() {
    docker_up && return 0
    if command -v docker >/dev/null && [[ -S /var/run/docker.sock ]] && (( EUID != 0 )); then
        fail "Docker runs but $(id -un) may not use it: add the user to the docker group (sudo usermod -aG docker $(id -un), then log in again), or run as root."
    fi
    if (( EUID != 0 )); then
        fail "no Docker engine is running, and starting one needs root: start Docker (or run this script as root, which installs Debian's docker.io and starts dockerd)."
    fi
    if ! command -v dockerd >/dev/null; then
        command -v apt-get >/dev/null \
            || fail "no Docker engine is installed and this is not a Debian-like system: install Docker first."
        step install-docker apt_install docker.io
    fi
    step start-dockerd start_dockerd
}

# --- 2. Host quirks ----------------------------------------------------------------------

# The bounding set lacks a capability the kernel has (Docker asks runc for all of them on
# --privileged, and runc refuses what it cannot grant).
capabilities_missing() {
    local last bnd full
    last="$(cat /proc/sys/kernel/cap_last_cap)"
    bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
    full=$(( (1 << (last + 1)) - 1 ))
    (( (16#$bnd & full) != full ))
}

# No process may lower its oom_score_adj (containerd and kubelet ask for -999 and -998).
negative_oom_refused() { ! sh -c 'echo -1 >/proc/self/oom_score_adj' 2>/dev/null; }

shim_bin() {
    local src="$HERE/kind/runc-shim" sum
    sum="$(cat "$src"/*.go "$src/go.mod" | sha256sum | cut -c1-12)"
    local out="$BIN/runc-shim-$sum"
    [[ -x "$out" ]] || go_source_build "$src" "$out" >&2
    echo "$out"
}

ensure_host_quirks() {
    local why=()
    capabilities_missing && why+=("the capability bounding set lacks capabilities --privileged asks for")
    negative_oom_refused && why+=("no process may set a negative oom_score_adj")
    if (( ${#why[@]} == 0 )); then
        log "host needs no runc workaround"
        return
    fi
    local shim
    shim="$(shim_bin)"
    if ! cmp -s "$shim" /usr/local/sbin/runc 2>/dev/null; then
        (( EUID == 0 )) || fail "this host needs a runc wrapper (${why[*]}) and installing it needs root."
        install -m 0755 "$shim" /usr/local/sbin/runc
        log "installed the runc wrapper as /usr/local/sbin/runc: $(IFS=';'; echo "${why[*]}")"
    fi
}

# --- 3. Tools ----------------------------------------------------------------------------

ensure_kind() {
    [[ -x "$BIN/kind-$KIND_VERSION" ]] && return
    go_builds_need_go "kind $KIND_VERSION"
    mkdir -p "$BIN/gobin"
    GOBIN="$BIN/gobin" nice go install "sigs.k8s.io/kind@$KIND_VERSION"
    mv "$BIN/gobin/kind" "$BIN/kind-$KIND_VERSION"
}

K8S_BIN="$CACHE/k8s-$K8S_VERSION/bin"
NODE_COMMANDS=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)

ensure_k8s_binaries() {
    local missing=() c
    for c in "${NODE_COMMANDS[@]}"; do [[ -x "$K8S_BIN/$c" ]] || missing+=("$c"); done
    (( ${#missing[@]} == 0 )) && return
    k8s_build "$CACHE/build/kubernetes" "$K8S_VERSION" "$K8S_BIN" "${missing[@]}"
}

ensure_crictl() {
    [[ -x "$K8S_BIN/crictl-$CRICTL_VERSION" ]] && return
    go_module_build "$CACHE/build/crictl" sigs.k8s.io/cri-tools "$CRICTL_VERSION" \
        sigs.k8s.io/cri-tools/cmd/crictl "$K8S_BIN/crictl-$CRICTL_VERSION"
}

ensure_coredns() {
    [[ -x "$K8S_BIN/coredns-$COREDNS_VERSION" ]] && return
    go_module_build "$CACHE/build/coredns" github.com/coredns/coredns "$COREDNS_VERSION" \
        github.com/coredns/coredns "$K8S_BIN/coredns-$COREDNS_VERSION"
}

ensure_etcd() {
    [[ -x "$K8S_BIN/etcd-$ETCD_VERSION" ]] && return
    go_module_build "$CACHE/build/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" \
        go.etcd.io/etcd/server/v3 "$K8S_BIN/etcd-$ETCD_VERSION"
}

ensure_pause() {
    [[ -x "$K8S_BIN/pause" ]] && return
    go_source_build "$HERE/kind/pause" "$K8S_BIN/pause"
}

ensure_tools() {
    step kind ensure_kind
    if [[ -z "${ULTRAPLANE_KIND_NODE_IMAGE:-}" ]]; then
        step kubernetes ensure_k8s_binaries
        step crictl ensure_crictl
        step coredns ensure_coredns
        step etcd ensure_etcd
        step pause ensure_pause
    fi
}

# --- 4. The node image -------------------------------------------------------------------

# Debian packages of the node (and of the project's fallback base): systemd as init,
# containerd and runc, the CNI plugins, and the tools kubeadm, kubelet and kube-proxy call.
BASE_PACKAGES=(systemd dbus containerd runc containernetworking-plugins iptables nftables
    conntrack iproute2 ethtool util-linux mount kmod libseccomp2 pigz bash ca-certificates
    curl jq procps socat ebtables python3 python3-venv python3-pip)
BASE_TAG="ultraplane.dev/debian-base:$SUITE-$(printf '%s\n' "${BASE_PACKAGES[@]}" | sha256sum | cut -c1-12)"

# `docker import` gives an image no environment: the images built on the base set PATH.
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

build_base() {
    command -v debootstrap >/dev/null || apt_install debootstrap
    local root="$CACHE/build/rootfs"
    rm -rf "$root" && mkdir -p "$root"
    debootstrap --variant=minbase --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
        "$SUITE" "$root" "$MIRROR"
    # The host's CA bundle, so pip inside image builds trusts what the host trusts (some
    # networks reach PyPI through a TLS proxy with its own certificate authority).
    if [[ -s /etc/ssl/certs/ca-certificates.crt ]]; then
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    fi
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    tar -C "$root" -c . | docker import - "$BASE_TAG"
    rm -rf "$root"
}

# The images kubeadm $K8S_VERSION pulls, built from the binaries (the names it expects).
component_images() {
    local dir="$CACHE/build/images" name
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$K8S_BIN"/kube-apiserver "$K8S_BIN"/kube-controller-manager "$K8S_BIN"/kube-scheduler \
        "$K8S_BIN"/kube-proxy "$K8S_BIN"/kubectl "$dir/"
    cp "$K8S_BIN/etcd-$ETCD_VERSION" "$dir/etcd"
    cp "$K8S_BIN/coredns-$COREDNS_VERSION" "$dir/coredns"
    cp "$K8S_BIN/pause" "$dir/pause"
    cp "$HERE/kind/node/cni-routes.sh" "$dir/cni-routes.sh"
    local images=() tag
    # One Dockerfile per image, each FROM the same base so the layers are shared.
    while read -r tag from dest entry; do
        printf 'FROM %s\nENV PATH=%s\nCOPY %s %s\nENTRYPOINT ["%s"]\n' "$BASE_TAG" "$IMAGE_PATH" "$from" "$dest" "$entry" \
            >"$dir/Dockerfile.$from"
        DOCKER_BUILDKIT=0 docker build -q -f "$dir/Dockerfile.$from" -t "$tag" "$dir" >/dev/null
        images+=("$tag")
    done < <(kubeadm_images)
    for tag in "${images[@]}"; do
        case "$tag" in registry.k8s.io/pause:*) ;; *) continue ;; esac
        # containerd's sandbox image in kind's config may differ from kubeadm's default.
        docker tag "$tag" registry.k8s.io/pause:3.10
    done
    images+=(registry.k8s.io/pause:3.10)
    printf 'FROM %s\nENV PATH='"$IMAGE_PATH"'\nCOPY cni-routes.sh /usr/local/bin/cni-routes.sh\nCOPY kubectl /usr/local/bin/kubectl\nENTRYPOINT ["/usr/local/bin/cni-routes.sh"]\n' \
        "$BASE_TAG" >"$dir/Dockerfile.cni"
    DOCKER_BUILDKIT=0 docker build -q -f "$dir/Dockerfile.cni" -t ultraplane.dev/kind-cni:local "$dir" >/dev/null
    images+=(ultraplane.dev/kind-cni:local)
    docker save "${images[@]}" -o "$CACHE/build/node/images.tar"
}

# tag, file in the build dir, path in the image, entrypoint: from `kubeadm config images list`.
kubeadm_images() {
    local image
    for image in $("$K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null); do
        case "$image" in
            */kube-apiserver:*) echo "$image kube-apiserver /usr/local/bin/kube-apiserver /usr/local/bin/kube-apiserver" ;;
            */kube-controller-manager:*) echo "$image kube-controller-manager /usr/local/bin/kube-controller-manager /usr/local/bin/kube-controller-manager" ;;
            */kube-scheduler:*) echo "$image kube-scheduler /usr/local/bin/kube-scheduler /usr/local/bin/kube-scheduler" ;;
            */kube-proxy:*) echo "$image kube-proxy /usr/local/bin/kube-proxy /usr/local/bin/kube-proxy" ;;
            */etcd:*) echo "$image etcd /usr/local/bin/etcd /usr/local/bin/etcd" ;;
            */coredns:*) echo "$image coredns /coredns /coredns" ;;
            */pause:*) echo "$image pause /pause /pause" ;;
            *) echo "kubeadm wants an image this script cannot build: $image" >&2; return 1 ;;
        esac
    done
}

node_inputs_sum() {
    { echo "$K8S_VERSION $KIND_VERSION $CRICTL_VERSION $COREDNS_VERSION $ETCD_VERSION $BASE_TAG"
      cat "$HERE"/kind/node/* "$HERE"/kind/runc-shim/*.go "$HERE"/kind/pause/*.go; } | sha256sum | cut -c1-12
}

build_node_image() {
    local ctx="$CACHE/build/node" kindsrc
    kindsrc="$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION/images/base/files"
    [[ -d "$kindsrc" ]] || (cd "$CACHE" && go mod download "sigs.k8s.io/kind@$KIND_VERSION")
    rm -rf "$ctx" && mkdir -p "$ctx/bin"
    cp -r "$kindsrc" "$ctx/files" && chmod -R u+w "$ctx/files"
    cp "$K8S_BIN"/kubelet "$K8S_BIN"/kubeadm "$K8S_BIN"/kubectl "$ctx/bin/"
    cp "$K8S_BIN/crictl-$CRICTL_VERSION" "$ctx/bin/crictl"
    cp "$(shim_bin)" "$ctx/bin/runc-shim"
    cp "$HERE"/kind/node/* "$ctx/"
    component_images
    echo "$K8S_VERSION" >"$ctx/version"
    DOCKER_BUILDKIT=0 docker build --build-arg BASE="$BASE_TAG" -t "$NODE_TAG" "$ctx"
    rm -rf "$ctx" "$CACHE/build/images"
}

# The stock image named by ULTRAPLANE_KIND_NODE_IMAGE, else the one built here, tagged by
# the hash of its inputs (set once by main).
NODE_TAG=""

ensure_node_image() {
    if [[ -n "${ULTRAPLANE_KIND_NODE_IMAGE:-}" ]]; then
        have_image "$NODE_TAG" || step pull-node-image docker pull "$NODE_TAG"
        return
    fi
    have_image "$BASE_TAG" || step debian-base build_base
    have_image "$NODE_TAG" || step node-image build_node_image
}

# --- 5. The project's image --------------------------------------------------------------

python_base() {
    if have_image "$PYTHON_IMAGE" || docker pull "$PYTHON_IMAGE" >"$LOGS/pull-python.log" 2>&1; then
        echo "$PYTHON_IMAGE"
        return
    fi
    log "cannot pull $PYTHON_IMAGE: the image's base is built from Debian packages (python3)" 
    have_image "$BASE_TAG" || step debian-base build_base
    echo "$BASE_TAG"
}

ensure_project_image() {
    local base
    mkdir -p "$LOGS"
    base="$(python_base)"
    local args=(--build-arg "BASE=$base")
    # The locally built base trusts the host's CA bundle (copied in); pip is told to use it.
    [[ "$base" == "$BASE_TAG" ]] && args+=(--build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
    step project-image env DOCKER_BUILDKIT=0 docker build "${args[@]}" -t "$IMAGE" "$ROOT"
    step project-image-runs docker run --rm --read-only --tmpfs /tmp "$IMAGE" --help
}

# --- 6. The cluster ----------------------------------------------------------------------

cluster_config() {
    local i
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    echo "nodes:"
    echo "  - role: control-plane"
    for ((i = 0; i < WORKERS; i++)); do echo "  - role: worker"; done
    # kubelet 1.37 refuses cgroup v1 unless told otherwise.
    if [[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]]; then
        echo "kubeadmConfigPatches:"
        echo "  - |"
        echo "    kind: KubeletConfiguration"
        echo "    failCgroupV1: false"
    fi
}

ensure_cluster() {
    if grep -qx "$CLUSTER" <<<"$(kind_bin get clusters 2>/dev/null)"; then
        log "reusing kind cluster $CLUSTER"
    else
        cluster_config >"$CACHE/cluster-$CLUSTER.yaml"
        created_cluster=1
        step create-cluster kind_bin create cluster --name "$CLUSTER" --image "$NODE_TAG" \
            --config "$CACHE/cluster-$CLUSTER.yaml" --wait 300s
    fi
    step load-image kind_bin load docker-image "$IMAGE" --name "$CLUSTER"
    created_cluster=0
}

check_disk() {
    local need="$1" where avail
    mkdir -p "$CACHE"
    for where in "$CACHE" /var/lib; do
        avail="$(df -Pk "$where" | awk 'NR == 2 {print int($4 / 1048576)}')"
        if (( avail < need )); then
            fail "only $avail GB free under $where; this step needs about $need GB (Go caches, images, nodes)."
        fi
    done
}

cmd_status() {
    echo "cache: $CACHE"
    [[ -x "$BIN/kind-$KIND_VERSION" ]] && echo "kind $KIND_VERSION: built" || echo "kind $KIND_VERSION: not built"
    docker_up || { echo "docker: not running"; return; }
    docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'ultraplane|kind' || true
    kind_bin get clusters 2>/dev/null || true
}

main() {
    local cmd="${1:-up}" start=$SECONDS
    case "$cmd" in
        up | image | node-image | tools | down | status) ;;
        *) echo "kind-cluster: unknown command '$cmd' (up, down, image, node-image, tools, status)." >&2; exit 2 ;;
    esac
    mkdir -p "$LOGS" "$BIN" 2>/dev/null \
        || fail "cannot create the cache directory $CACHE: set XDG_CACHE_HOME to a writable directory."
    # One builder at a time.
    exec 9>"$CACHE/.lock"
    flock 9
    case "$cmd" in
        status) cmd_status; return ;;
        tools) check_disk "$WARM_DISK_GB"; ensure_tools; echo "$K8S_BIN"; return ;;
        down)
            ensure_docker; step kind ensure_kind
            kind_bin delete cluster --name "$CLUSTER"
            return ;;
    esac
    ensure_docker
    ensure_host_quirks
    if [[ "$cmd" == image ]]; then
        check_disk "$WARM_DISK_GB"; ensure_project_image; echo "$IMAGE"; return
    fi
    NODE_TAG="${ULTRAPLANE_KIND_NODE_IMAGE:-ultraplane.dev/kind-node:$K8S_VERSION-$(node_inputs_sum)}"
    if [[ -z "${ULTRAPLANE_KIND_NODE_IMAGE:-}" ]] && ! have_image "$NODE_TAG"; then
        check_disk "$COLD_DISK_GB"
    else
        check_disk "$WARM_DISK_GB"
    fi
    ensure_tools
    ensure_node_image
    if [[ "$cmd" == node-image ]]; then echo "$NODE_TAG"; return; fi
    ensure_project_image
    ensure_cluster
    log "cluster $CLUSTER is up in $((SECONDS - start)) s: kubectl --context kind-$CLUSTER"
    echo "kind-$CLUSTER"
}

# Sourced (for a single step while debugging), it defines the functions only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
