"""Pod data plane benchmark on a real kube-apiserver + etcd: jobs launched and completed as pods.

Run: `python bench/pods.py` (several minutes on 2 cores; `--quick` for a smoke run). It starts
the tier of tests/integration (hack/envtest.sh binaries), creates 64 Trn3 Gen2 UltraServers and
one Node object per server (2,304 Nodes, labelled as `--ultraservers-from-nodes` reads them),
then starts the operator as a subprocess (`ultraplane operator --standalone`, pods on, Events on,
as in production) and creates 1,000 jobs of mixed sizes at once (80% TrainingJobs of 1-144
chips, 20% InferenceJobs of 1-4 replicas of 4-16 chips; seeded), more than the fleet holds at
one time, so they queue and run in waves.

There is no kubelet: the benchmark plays one for every Node, from a pod watch: a new pod is
reported `Running` at once, a pod being deleted has its deletion finished (grace 0, as a
kubelet does once the containers stopped), and `HOLD` seconds after a job is `Running` its
rank-0 pod (training) or every pod (inference) is reported `Succeeded`. The operator must create
every pod, see them run, write Running, see the success, write Succeeded, delete what is left
and admit the next jobs onto the freed chips.

Figures: pods created per second over the run (first job create to last job Succeeded);
admit-to-all-running latency per job (the bench's job watch sees `Admitted`, then `Running`,
which the operator writes once every pod runs); `admissions_held_s`, the time the operator held
its admission cycles because the pod creates already queued would take longer than
`--launch-backlog-seconds` (the wait a job then spends before its admission, not after it).
Baseline in the same run: the same client creating pods directly, with no operator (the API
server's create ceiling on this machine).

It also prints the API server's request counts during the run (`apiserver_request_total` per
resource and verb: what each pod and job costs in writes), and `--apiserver-profile SECONDS`
writes a Go CPU profile of the API server (`go tool pprof -top apiserver.pprof`).

Ends with ONE JSON line:
{"nodes":..., "jobs":..., "pods":..., "pods_per_s":..., "admit_to_all_running_p99_s":...}
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.integration.kube_tier import KubeEnv, find_binaries  # noqa: E402
from tests.integration.operator_harness import GROUP, VERSION, Harness  # noqa: E402

SEED = 13
HOLD = 1.0  # seconds a job runs once all its pods run
NS = "bench"
TRAIN_SIZES = (1, 2, 4, 8, 16, 36, 72, 144)
TRAIN_WEIGHTS = (0.20, 0.15, 0.20, 0.15, 0.15, 0.08, 0.05, 0.02)
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "trainer:bench"}]}}
PLURALS = ("trainingjobs", "inferencejobs")
# Real kubelets act in parallel, one per Node: the played one needs enough threads that its own
# queue never holds a pod back (with 16, a wave's Running reports waited 16 s in it).
KUBELET_THREADS = 64


def mixed_jobs(n: int, rng: random.Random) -> list[dict[str, Any]]:
    jobs = []
    for i in range(n):
        name = f"j{i:04d}"
        meta = {"name": name, "namespace": NS}
        if rng.random() < 0.8:
            size = rng.choices(TRAIN_SIZES, TRAIN_WEIGHTS)[0]
            spec: dict[str, Any] = {"chips": size, "model": {"name": "llama"},
                                    "work": {"durationSeconds": 600}, "template": TEMPLATE}
            if 36 <= size <= 144:
                spec["topology"] = {"requiredLevel": "ultraserver"}
            jobs.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
                         "metadata": meta, "spec": spec})
        else:
            spec = {"replicas": rng.randint(1, 4), "chipsPerReplica": rng.choice((4, 8, 16)),
                    "model": {"name": "llama"}, "load": {"requestsPerSecond": 10},
                    "topology": {"requiredLevel": "ultraserver"}, "template": TEMPLATE}
            jobs.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceJob",
                         "metadata": meta, "spec": spec})
    return jobs


def make_fleet(h: Harness, core: Any, ultraservers: int) -> int:
    """UltraServers and their Nodes (created in parallel); returns the Node count."""
    def one(u: int) -> None:
        us = f"bench-{u:03d}"
        h.ultraserver(us)
        for s in range(36):
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": f"{us}-n{s:02d}",
                "labels": {"ultraplane.dev/ultraserver": us, "ultraplane.dev/server-index": str(s),
                           "node.kubernetes.io/instance-type": "trn3u.12xlarge"}}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(ultraservers)))
    return ultraservers * 36


def released(response: Any) -> None:
    """Read a raw response to its end so its connection goes back to the pool (unread, each
    call opened a new TLS connection: the kubelet and the baseline paid handshakes, not API)."""
    response.drain_conn()
    response.release_conn()


def create_baseline(core: Any, count: int) -> float:
    """Pods created directly (no operator), same body shape, 16 threads: pods/s."""
    core.create_namespace({"metadata": {"name": "bench-baseline"}})

    def one(i: int) -> None:
        released(core.create_namespaced_pod("bench-baseline", {
            "metadata": {"name": f"p{i:05d}"},
            "spec": {"nodeName": f"bench-000-n{i % 36:02d}", **TEMPLATE["spec"]}},
            _preload_content=False))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    rate = count / (time.perf_counter() - t0)
    core.delete_collection_namespaced_pod("bench-baseline", grace_period_seconds=0)
    return rate


class WireError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status = status


class Wire:
    """The played kubelet's writes as bare HTTPS requests on one urllib3 pool (the generated
    client validates every call's arguments and walks its body: a millisecond of the bench's
    CPU per call, which the API server and the operator share on this machine). A real
    kubelet runs on its own node; its writes should cost this machine only the API server's
    side."""

    def __init__(self, env: KubeEnv, size: int) -> None:
        import urllib3

        self.base = env.server
        self.pool = urllib3.PoolManager(maxsize=size, block=True, ca_certs=str(env.ca_file))
        self.auth = f"Bearer {env.token}"

    def send(self, method: str, path: str, body: dict[str, Any]) -> None:
        kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
        response = self.pool.request(method, self.base + path, body=json.dumps(body).encode(),
                                     headers={"Authorization": self.auth, "Content-Type": kind,
                                              "Accept": "application/json"})
        if not 200 <= response.status <= 299:
            raise WireError(response.status, response.data.decode(errors="replace"))


class Kubelet:
    """Plays the kubelet of every Node from one pod watch, and finishes jobs from a job watch."""

    def __init__(self, h: Harness, core: Any, wire: Wire, *, hold: float = HOLD) -> None:
        self.h, self.core, self.wire, self.hold = h, core, wire, hold
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(KUBELET_THREADS, thread_name_prefix="kubelet")
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.deleting: set[str] = set()
        self.pods_of: dict[str, dict[str, dict[str, str]]] = {}  # job -> pod -> labels
        self.created = 0
        self.admitted: dict[str, float] = {}  # job/attempt -> first seen Admitted
        self.all_running: dict[str, float] = {}
        self.finished: dict[str, str] = {}
        self.heap: list[tuple[float, str, str]] = []
        self.first_pod: float | None = None

    def start(self) -> None:
        for target in (self._watch_pods, self._watch_jobs, self._finisher):
            threading.Thread(target=target, daemon=True).start()

    # -- pods ------------------------------------------------------------------------
    def _pod(self, obj: dict[str, Any], kind: str) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        job = (meta.get("annotations") or {}).get("ultraplane.dev/job-key", "")
        if kind == "DELETED":
            with self.lock:
                self.running.discard(name)
                self.deleting.discard(name)
                self.pods_of.get(job, {}).pop(name, None)
            return
        with self.lock:
            self.pods_of.setdefault(job, {})[name] = meta.get("labels") or {}
            if meta.get("deletionTimestamp") is not None:
                if name in self.deleting:
                    return
                self.deleting.add(name)
                action = "delete"
            elif name not in self.running and \
                    ((obj.get("status") or {}).get("phase") or "Pending") == "Pending":
                self.running.add(name)
                self.created += 1
                if self.first_pod is None:
                    self.first_pod = time.monotonic()
                action = "Running"
            else:
                return
        self.pool.submit(self._act, name, action)

    def _act(self, name: str, action: str) -> None:
        try:
            if action == "delete":
                self.wire.send("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}",
                               {"gracePeriodSeconds": 0})
            else:
                self.wire.send("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                               {"status": {"phase": action}})
        except WireError as exc:  # a pod deleted meanwhile: nothing to report
            if exc.status != 404 and not self.stop.is_set():
                print(f"kubelet: {action} {name}: {exc}", file=sys.stderr)

    def _watch_pods(self) -> None:
        """Raw JSON lines, not the client's model objects: a kubelet decodes a pod in
        microseconds, and the benchmark must not spend the CPU the operator and API server share."""
        rv = None
        while not self.stop.is_set():
            try:
                if rv is None:
                    listed = json.loads(self.core.list_namespaced_pod(
                        NS, _preload_content=False).data)
                    for obj in listed["items"]:
                        self._pod(obj, "ADDED")
                    rv = listed["metadata"]["resourceVersion"]
                resp = self.core.list_namespaced_pod(NS, watch=True, resource_version=rv,
                                                     timeout_seconds=30,
                                                     allow_watch_bookmarks=True,
                                                     _preload_content=False)
                buf = b""
                for chunk in resp.stream(65536):
                    *lines, buf = (buf + chunk).split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            if (ev["object"] or {}).get("code") == 410:
                                rv = None
                            break
                        rv = ev["object"]["metadata"].get("resourceVersion", rv)
                        if ev["type"] != "BOOKMARK":
                            self._pod(ev["object"], ev["type"])
                    else:
                        continue
                    break
                resp.close()  # a watch connection is not reused
            except Exception as exc:
                if getattr(exc, "status", None) == 410:
                    rv = None
                time.sleep(0.1)

    # -- jobs ------------------------------------------------------------------------
    def _job(self, obj: dict[str, Any]) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        kind = obj.get("kind", "TrainingJob")
        key = f"{'tj' if kind == 'TrainingJob' else 'ij'}/{NS}/{meta['name']}"
        phase = status.get("phase")
        tag = f"{key}@{status.get('attempt')}"
        now = time.monotonic()
        if phase == "Admitted":
            self.admitted.setdefault(tag, now)
        elif phase == "Running" and tag not in self.all_running:
            self.all_running[tag] = now
            with self.lock:
                heapq.heappush(self.heap, (now + self.hold, key, kind))
        elif phase in ("Succeeded", "Failed"):
            self.finished.setdefault(key, phase)

    def _watch_jobs(self) -> None:
        from kubernetes import watch

        def one(plural: str) -> None:
            rv = None
            while not self.stop.is_set():
                try:
                    if rv is None:
                        listed = self.h.api.list_namespaced_custom_object(GROUP, VERSION, NS,
                                                                          plural)
                        rv = listed["metadata"]["resourceVersion"]
                        for obj in listed["items"]:
                            self._job(obj)
                    for ev in watch.Watch().stream(self.h.api.list_namespaced_custom_object,
                                                   GROUP, VERSION, NS, plural,
                                                   resource_version=rv, timeout_seconds=30):
                        rv = ev["object"]["metadata"].get("resourceVersion", rv)
                        self._job(ev["object"])
                except Exception as exc:
                    if getattr(exc, "status", None) == 410:
                        rv = None
                    time.sleep(0.1)

        threading.Thread(target=one, args=(PLURALS[1],), daemon=True).start()
        one(PLURALS[0])

    def _finisher(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                due = []
                while self.heap and self.heap[0][0] <= time.monotonic():
                    due.append(heapq.heappop(self.heap))
                pods = {key: dict(self.pods_of.get(key, {})) for _, key, _ in due}
            for _, key, kind in due:
                for name, labels in pods[key].items():
                    if kind == "InferenceJob" or (labels.get("ultraplane.dev/rank") == "0"
                                                  and labels.get("ultraplane.dev/group") == "0"):
                        self.pool.submit(self._act, name, "Succeeded")
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_get(env: KubeEnv, path: str, timeout: float = 30) -> bytes:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(env.ca_file))
    req = urllib.request.Request(f"{env.server}{path}",
                                 headers={"Authorization": f"Bearer {env.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
        return bytes(resp.read())


def requests_by_kind(env: KubeEnv) -> dict[str, int]:
    """The API server's request counters (`apiserver_request_total`), summed per resource and
    verb: `pods/create`, `pods/status/patch`... (what each pod and job costs in writes)."""
    import re

    counts: dict[str, int] = {}
    line = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<n>[0-9.e+]+)$')
    for text in api_get(env, "/metrics").decode().splitlines():
        m = line.match(text)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        what = "/".join(x for x in (labels.get("resource"), labels.get("subresource"),
                                    labels.get("verb", "").lower()) if x)
        counts[what] = counts.get(what, 0) + int(float(m["n"]))
    return counts


def held_seconds(log: Path) -> float:
    """Seconds the operator held its admission cycles for the pod launch backlog, from its log
    ("admissions resumed after X s held for pod launches")."""
    import re

    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(float(x) for x in re.findall(r"admissions resumed after ([\d.]+) s held", text))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 UltraServers, 100 jobs")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--verbose", action="store_true", help="operator debug log")
    parser.add_argument("--apiserver-profile", type=int, default=0, metavar="SECONDS",
                        help="write a Go CPU profile of the API server (the run's first "
                        "SECONDS) to ./apiserver.pprof")
    args = parser.parse_args()
    n_us, n_jobs = (8, 100) if args.quick else (64, 1000)
    rng = random.Random(SEED)
    jobs = mixed_jobs(n_jobs, rng)

    env = KubeEnv(bin_dir=find_binaries(), workdir=Path(tempfile.mkdtemp(prefix="bench-pods-")))
    env.start()
    try:
        from kubernetes import client

        env.apply_crds()
        # the pool size must be set before the client exists (its connection pool is built
        # then): with the default of 10, the kubelet's threads opened a TLS connection each
        cfg = env.configuration()
        cfg.connection_pool_maxsize = KUBELET_THREADS + 16
        core = client.CoreV1Api(client.ApiClient(cfg))
        env.kubectl("create", "namespace", NS)
        logdir = env.workdir / "logs"
        h = Harness(env, NS, logdir)
        t0 = time.perf_counter()
        nodes = make_fleet(h, core, n_us)
        print(f"fleet: {n_us} UltraServers, {nodes} Nodes in {time.perf_counter() - t0:.1f}s")
        base = create_baseline(core, 500 if args.quick else 1000)
        print(f"baseline: {base:.0f} pods/s created directly (no operator)")

        kubelet = Kubelet(h, core, Wire(env, KUBELET_THREADS))
        kubelet.start()
        h.start(*(["-v"] if args.verbose else []))
        procs = {"operator": h.proc.pid if h.proc else 0, "bench": os.getpid(),
                 **{name: p.pid for name, p in env._procs}}
        cpu0 = {n: cpu_seconds(pid) for n, pid in procs.items()}
        requests0 = requests_by_kind(env)
        print(f"pids (for py-spy): {procs}", flush=True)
        if args.apiserver_profile:  # a CPU profile of the API server over the run's start
            def profile() -> None:
                data = api_get(env, f"/debug/pprof/profile?seconds={args.apiserver_profile}",
                               timeout=args.apiserver_profile + 60)
                Path("apiserver.pprof").write_bytes(data)
            threading.Thread(target=profile, daemon=True).start()
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda b: h.api.create_namespaced_custom_object(
                GROUP, VERSION, NS, "trainingjobs" if b["kind"] == "TrainingJob"
                else "inferencejobs", b), jobs))
        print(f"created {n_jobs} jobs in {time.monotonic() - started:.1f}s")
        deadline = started + args.timeout
        last = 0
        while len(kubelet.finished) < n_jobs and time.monotonic() < deadline:
            time.sleep(1)
            if time.monotonic() - last >= 15:
                last = time.monotonic()
                print(f"  t={last - started:5.0f}s finished {len(kubelet.finished)}/{n_jobs}, "
                      f"pods {kubelet.created}", flush=True)
        ended = time.monotonic()
        cpu = {n: round(cpu_seconds(pid) - cpu0[n], 1) for n, pid in procs.items()}
        requests1 = requests_by_kind(env)
        made = {k: n - requests0.get(k, 0) for k, n in sorted(requests1.items())
                if n - requests0.get(k, 0) >= 10 and not k.endswith(("/watch", "/list"))}
        lists = {k: n - requests0.get(k, 0) for k, n in sorted(requests1.items())
                 if n - requests0.get(k, 0) >= 1 and k.endswith("/list")}
        kubelet.stop.set()
        complete = len(kubelet.finished) == n_jobs
        if not complete:  # say where the rest stand
            left: dict[str, int] = {}
            for plural in PLURALS:
                for obj in h.api.list_namespaced_custom_object(GROUP, VERSION, NS, plural)["items"]:
                    st = obj.get("status") or {}
                    if st.get("phase") not in ("Succeeded", "Failed"):
                        what = f"{st.get('phase')}/{st.get('reason')}"
                        left[what] = left.get(what, 0) + 1
            print(f"unfinished jobs by phase/reason: {left}")
            phases: dict[str, int] = {}
            for pod in core.list_namespaced_pod(NS).items:
                what = str(pod.status.phase) + ("/deleting" if pod.metadata.deletion_timestamp
                                                else "")
                phases[what] = phases.get(what, 0) + 1
            print(f"pods by phase: {phases}")
        failed = sum(1 for p in kubelet.finished.values() if p == "Failed")
        lat = [kubelet.all_running[t] - kubelet.admitted[t] for t in kubelet.all_running
               if t in kubelet.admitted]
        duration = ended - started
        rate = kubelet.created / duration
        p99 = quantile(lat, 0.99)
        print(f"jobs finished: {len(kubelet.finished)}/{n_jobs} ({failed} Failed) in "
              f"{duration:.1f}s{'' if complete else ' (TIMED OUT)'}")
        print(f"pods: {kubelet.created} created and run, {rate:.1f} pods/s "
              f"(baseline direct creates {base:.0f}/s; ratio {rate / base:.3f})")
        if lat:
            print(f"admit -> all pods running (operator writes Running): p50 "
                  f"{statistics.median(lat):.2f}s p99 {p99:.2f}s max {max(lat):.2f}s "
                  f"over {len(lat)} attempts")
        print(f"API requests during the run (10 or more; watches and lists left out): {made}")
        print(f"lists during the run (each walks every object of its kind): {lists}")
        print(f"CPU seconds during the run ({duration:.0f}s wall, 2 shared cores): {cpu}")
        print(f"targets: pods/s >= 100: {'met' if rate >= 100 else 'MISSED'}; "
              f"p99 <= 10 s: {'met' if lat and p99 <= 10 else 'MISSED'}")
        h.stop()
        held = held_seconds(logdir / f"operator-{NS}-{h.starts}.log")
        print(f"admissions held for the launch backlog (--launch-backlog-seconds): {held:.1f}s "
              "in total (the wait moves from after admission to before it; pods/s is the "
              "throughput either way)")
        figures = {"nodes": nodes, "jobs": n_jobs, "pods": kubelet.created,
                   "pods_per_s": round(rate, 1), "admit_to_all_running_p99_s": round(p99, 2),
                   "admit_to_all_running_p50_s": round(statistics.median(lat), 2) if lat else None,
                   "jobs_finished": len(kubelet.finished), "jobs_failed": failed,
                   "duration_s": round(duration, 1), "baseline_direct_pods_per_s": round(base, 1),
                   "complete": complete, "admissions_held_s": round(held, 1),
                   "cpu_seconds": cpu}
    finally:
        env.stop()
        env.drop_data()
    print(f"logs in {env.workdir / 'logs'}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
