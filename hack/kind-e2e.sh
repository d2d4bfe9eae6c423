#!/usr/bin/env bash
# The user's steps against a cluster, one check at each: apply the examples, see them run, use
# the REST API, clean up. tests/integration/test_helm_live.py runs the apply, lifecycle, rest
# and cleanup steps against a local API server with the components as processes
# (KUBE_CONTEXT, API_URL). The kind tier itself is tests/e2e, with hack/kind-cluster.sh.
#
# Usage: hack/kind-e2e.sh [STEP...]
#   no step / all  the four steps below, in order
#   apply          apply examples/: the UltraServers (recording their free chips), then the jobs
#   lifecycle      wait for every example job to be Admitted and Running with energy accruing,
#                  and for FINISHING_JOBS to be Succeeded with energy in their status
#   rest           check the REST API through a port-forward (health, readiness, jobs, fleet)
#   cleanup        delete the jobs and check every UltraServer has as many free chips as before
# The cluster, the image and the chart are not this script's business: hack/kind-cluster.sh
# and `helm install` (README, "Try it on kind") make them.
#
# Knobs (environment): KIND_CLUSTER_NAME (ultraplane-e2e), KUBE_CONTEXT (kind-$KIND_CLUSTER_NAME),
# API_URL (else a port-forward to the chart's API Service), NAMESPACE (ultraplane-system),
# JOB_NAMESPACE (default), FINISHING_JOBS (trainingjob/finetune-8b),
# WAIT_SECONDS (300, per wait).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER_NAME:-ultraplane-e2e}"
NAMESPACE="${NAMESPACE:-ultraplane-system}"
WAIT_SECONDS="${WAIT_SECONDS:-300}"
API_LOCAL_PORT="${API_LOCAL_PORT:-18080}"
# KUBE_CONTEXT / API_URL point the apply, lifecycle, rest and cleanup steps at another
# cluster and API (e.g. a local API server with the components run as processes).
CONTEXT="${KUBE_CONTEXT:-kind-${CLUSTER}}"
EXAMPLES="${EXAMPLES:-$ROOT/examples}"
JOB_NAMESPACE="${JOB_NAMESPACE:-default}"
# Example jobs short enough to finish at the simulator's time scale ("kind/name", space-separated).
FINISHING_JOBS="${FINISHING_JOBS:-trainingjob/finetune-8b}"
STATE_DIR="${STATE_DIR:-${TMPDIR:-/tmp}/ultraplane-kind-e2e-$CLUSTER}"

log() { printf '[kind-e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
kc() { kubectl --context "$CONTEXT" "$@"; }

# UltraServers first: their free chips, once the operator has written their status, are the
# baseline that `cleanup` compares against after every job is deleted.
step_apply() {
    local fleet=() jobs=() f us free
    # Every examples/*.yaml is a manifest (--cluster files live in examples/clusters/); the
    # check stays so a stray file is named instead of failing kubectl.
    for f in "$EXAMPLES"/*.yaml; do
        grep -q '^apiVersion: ultraplane.dev/' "$f" || { log "not a manifest, skipped: ${f##*/}"; continue; }
        if grep -q '^kind: UltraServer' "$f"; then fleet+=("$f"); else jobs+=("$f"); fi
    done
    (( ${#fleet[@]} > 0 )) || die "no UltraServer manifest in $EXAMPLES."
    (( ${#jobs[@]} > 0 )) || die "no job manifest in $EXAMPLES."
    log "applying the fleet: ${fleet[*]##*/}"
    for f in "${fleet[@]}"; do kc apply -f "$f"; done
    mkdir -p "$STATE_DIR"
    : >"$STATE_DIR/free-before"
    for us in $(kc get ultraservers -o jsonpath='{.items[*].metadata.name}'); do
        wait_for "capacity in status" "ultraserver/$us" default '{.status.capacity.chips}' is_positive
        free="$(kc get ultraserver "$us" -o jsonpath='{.status.free.chips}')"
        echo "$us $free" >>"$STATE_DIR/free-before"
    done
    log "applying the jobs into namespace $JOB_NAMESPACE: ${jobs[*]##*/}"
    for f in "${jobs[@]}"; do kc apply -n "$JOB_NAMESPACE" -f "$f"; done
}

# Predicates on a jsonpath value, for wait_for.
is_nonempty() { [[ -n "$1" ]]; }
is_positive() { awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
is_one_of() { local v="$1" want; shift; for want in "$@"; do [[ "$v" == "$want" ]] && return 0; done; return 1; }

# wait_for WHAT OBJECT NAMESPACE JSONPATH PREDICATE [ARGS...]: polls until PREDICATE(value,
# ARGS...) holds, and prints the object's status when it times out.
wait_for() {
    local what="$1" obj="$2" ns="$3" path="$4" deadline=$((SECONDS + WAIT_SECONDS)) value=""
    shift 4
    while (( SECONDS < deadline )); do
        value="$(kc -n "$ns" get "$obj" -o jsonpath="$path" 2>/dev/null || true)"
        if "$1" "$value" "${@:2}"; then log "$obj: $what ($value)"; return 0; fi
        sleep 2
    done
    kc -n "$ns" get "$obj" -o yaml | tail -60 >&2
    die "$obj in $ns: timed out after ${WAIT_SECONDS}s waiting for $what (last: '$value')."
}

condition() { echo "{.status.conditions[?(@.type==\"$1\")].status}"; }

# Every example job must be admitted and start running, with power and energy accruing; the
# jobs in FINISHING_JOBS (short enough at the time scale) must also succeed. The others (e.g. the
# 288-chip pre-training example, weeks of simulated time) are deleted while still running.
step_lifecycle() {
    local kind job found=0
    for kind in trainingjob inferencejob; do
        for job in $(kc -n "$JOB_NAMESPACE" get "${kind}s" -o jsonpath='{.items[*].metadata.name}'); do
            found=1
            wait_for "Admitted" "$kind/$job" "$JOB_NAMESPACE" "$(condition Admitted)" is_one_of True
            wait_for "allocated" "$kind/$job" "$JOB_NAMESPACE" '{.status.allocation.ultraServers}' is_nonempty
            # startTime stays set after Running, even if the job finished between two polls.
            wait_for "Running (startTime)" "$kind/$job" "$JOB_NAMESPACE" '{.status.startTime}' is_nonempty
            wait_for "energy accruing" "$kind/$job" "$JOB_NAMESPACE" '{.status.energyKWh}' is_positive
        done
    done
    (( found )) || die "no job of examples/ is in namespace $JOB_NAMESPACE."
    for job in $FINISHING_JOBS; do
        wait_for "Succeeded" "$job" "$JOB_NAMESPACE" '{.status.phase}' is_one_of Succeeded
        wait_for "completionTime" "$job" "$JOB_NAMESPACE" '{.status.completionTime}' is_nonempty
        wait_for "energy in status" "$job" "$JOB_NAMESPACE" '{.status.energyKWh}' is_positive
    done
}

# A ServiceAccount token for the REST checks, with RBAC on the two job kinds only: the
# chart's API authorizes every job request for its caller (TokenReview + SubjectAccessReview).
rest_token() {
    kc -n "$JOB_NAMESPACE" create serviceaccount e2e-rest --dry-run=client -o yaml | kc apply -f - >/dev/null
    kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ultraplane-e2e-rest}
rules:
  - apiGroups: [ultraplane.dev]
    resources: [trainingjobs, inferencejobs]
    verbs: [get, list, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ultraplane-e2e-rest-$JOB_NAMESPACE}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ultraplane-e2e-rest}
subjects: [{kind: ServiceAccount, name: e2e-rest, namespace: $JOB_NAMESPACE}]
EOF
    kc -n "$JOB_NAMESPACE" create token e2e-rest --duration=1h
}

rest_checks() {
    local base="$1" body name=e2e-rest token auth
    token="$(rest_token)" || die "cannot make a ServiceAccount token for the REST checks."
    auth="Authorization: Bearer $token"
    for _ in $(seq 1 30); do curl -fsS "$base/healthz" >/dev/null 2>&1 && break; sleep 1; done
    curl -fsS "$base/healthz" >/dev/null || die "GET /healthz failed."
    curl -fsS "$base/readyz" >/dev/null || die "GET /readyz failed."
    # Read the whole body first: `curl | grep -q` fails under pipefail when grep stops reading
    # at its first match and curl cannot write the rest (curl exit 23).
    body="$(curl -fsS "$base/metrics")" || die "GET /metrics failed."
    grep -q '^# HELP' <<<"$body" || die "GET /metrics has no Prometheus text."
    body="$(curl -fsS "$base/v1/ultraservers")" || die "GET /v1/ultraservers failed."
    for us in $(kc get ultraservers -o jsonpath='{.items[*].metadata.name}'); do
        grep -q "\"$us\"" <<<"$body" || die "GET /v1/ultraservers does not list $us: $body"
    done
    body="$(curl -fsS -H "$auth" "$base/v1/trainingjobs")" || die "GET /v1/trainingjobs failed."
    for job in $(kc -n "$JOB_NAMESPACE" get trainingjobs -o jsonpath='{.items[*].metadata.name}'); do
        grep -q "\"$job\"" <<<"$body" || die "GET /v1/trainingjobs does not list $job: $body"
    done
    for job in $FINISHING_JOBS; do
        body="$(curl -fsS -H "$auth" "$base/v1/namespaces/$JOB_NAMESPACE/${job%%/*}s/${job#*/}")" \
            || die "GET of $job failed."
        grep -q '"Succeeded"' <<<"$body" || die "the API does not show $job Succeeded: $body"
    done
    code="$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        "$base/v1/namespaces/$JOB_NAMESPACE/trainingjobs" -d '{}')"
    [[ "$code" == 401 ]] || die "POST without a bearer token answered $code, not 401."
    # A job submitted through the API is a real custom resource: the operator admits it.
    curl -fsS -X POST -H 'Content-Type: application/json' -H "$auth" \
        "$base/v1/namespaces/$JOB_NAMESPACE/trainingjobs" \
        -d "{\"metadata\": {\"name\": \"$name\"}, \"spec\": {\"chips\": 4, \"work\": {\"durationSeconds\": 864000}}}" \
        >/dev/null || die "POST of a TrainingJob failed."
    wait_for "Admitted (created through the API)" "trainingjob/$name" "$JOB_NAMESPACE" \
        "$(condition Admitted)" is_one_of True
    curl -fsS -X DELETE -H "$auth" "$base/v1/namespaces/$JOB_NAMESPACE/trainingjobs/$name" >/dev/null \
        || die "DELETE of trainingjob/$name failed."
    for _ in $(seq 1 60); do
        kc -n "$JOB_NAMESPACE" get "trainingjob/$name" >/dev/null 2>&1 || return 0
        sleep 1
    done
    die "trainingjob/$name still exists 60s after DELETE through the API."
}

step_rest() {
    local svc port pf_pid rc=0
    if [[ -n "${API_URL:-}" ]]; then
        ( rest_checks "$API_URL" ) || exit $?
        log "REST API ok at $API_URL"
        return
    fi
    svc="$(kc -n "$NAMESPACE" get svc -l app.kubernetes.io/component=api -o name | head -1)"
    [[ -n "$svc" ]] || die "no API Service in $NAMESPACE."
    port="$(kc -n "$NAMESPACE" get "$svc" -o jsonpath='{.spec.ports[0].port}')"
    kc -n "$NAMESPACE" port-forward "$svc" "$API_LOCAL_PORT:$port" >/dev/null 2>&1 &
    pf_pid=$!
    # A subshell so that die() inside the checks still lets us stop the port-forward.
    ( rest_checks "http://127.0.0.1:$API_LOCAL_PORT" ) || rc=$?
    kill "$pf_pid" 2>/dev/null || true
    wait "$pf_pid" 2>/dev/null || true
    (( rc == 0 )) || exit "$rc"
    log "REST API ok: health, readiness, metrics, UltraServers, jobs, create and delete"
}

step_cleanup() {
    log "deleting the example jobs"
    kc -n "$JOB_NAMESPACE" delete trainingjobs,inferencejobs --all --wait --timeout "${WAIT_SECONDS}s"
    [[ -s "$STATE_DIR/free-before" ]] || die "no baseline of free chips: run the apply step first."
    local us before
    while read -r us before; do
        wait_for "no chip allocated" "ultraserver/$us" default '{.status.allocated.chips}' is_one_of 0
        wait_for "all $before chips free again" "ultraserver/$us" default '{.status.free.chips}' \
            is_one_of "$before"
        wait_for "no jobs listed" "ultraserver/$us" default '{.status.jobs}' is_one_of "" "[]"
    done <"$STATE_DIR/free-before"
}

ALL=(apply lifecycle rest cleanup)
steps=("$@")
if (( ${#steps[@]} == 0 )) || [[ "${steps[0]}" == all ]]; then
    steps=("${ALL[@]}")
fi
for s in "${steps[@]}"; do
    declare -F "step_$s" >/dev/null || { echo "kind-e2e: unknown step '$s' (steps: ${ALL[*]})." >&2; exit 2; }
    log "== $s"
    "step_$s"
done
log "done: ${steps[*]}"
