"""Operator benchmark on a real kube-apiserver + etcd: create -> Admitted latency and throughput.

Run: `python bench/operator.py` (a few minutes on 2 cores; `--quick` for a smoke run). It starts
the same tier as tests/integration (hack/envtest.sh binaries) and the operator as a subprocess
(`ultraplane operator --standalone`, Events on, as in production).

Phase 1: 256 Trn3 Gen2 UltraServers (36,864 chips) and 5,000 jobs of mixed sizes (1-144 chips,
seeded) that together fit, created at once by 16 client threads. Latency = from the start of
the job's create call to the moment a watch on the client side sees `status.phase: Admitted`.
Baseline in the same run: the pure `Scheduler` admitting the same jobs in memory (no API server),
to show what the Kubernetes round trips cost.
Phase 2: twice what a 32-UltraServer fleet holds, in 3 priority classes; a finisher plays the
simulator (Succeeded after ~1 s). Shows the queue draining in priority order: mean admission
time per class.
Phase 3 (queue depth): 5,000 jobs waiting that cannot fit; a new job that fits now is
created and timed to Admitted (the complaint about Kueue: minutes on deep queues), and the head
of the queue is deleted to time how soon the next job's written queue position follows.
Restart: the operator of phase 1 is killed -9 and started again on the same objects; start-up is
from the process start to its first admission cycle (list, rebuild, decide, write).

Writes per admission come from the API server's own `apiserver_request_total` (every POST, PUT,
PATCH and DELETE during phase 1, creates included, divided by the jobs admitted).

`--queues 8`: the jobs of every phase name one of 8 TenantQueues of one cohort (round robin),
each with an equal nominal share of phase 1's fleet, so every cycle also does the quota
accounting, the fair-share order and the placement that keeps borrowers apart.

`--fleet-chips 1000000`: the same measurements on a fleet of that many chips (6,945 Gen2
UltraServers in EFA blocks of 32) with 20,000 jobs of up to 576 chips, about a fifth of them
waiting; phases 2 and 3 are skipped.

Ends with ONE JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
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
from ultraplane.hardware.topology import build_fleet  # noqa: E402
from ultraplane.ids import JobKey  # noqa: E402
from ultraplane.placement.allocator import Allocator, PlacementRequest  # noqa: E402
from ultraplane.scheduling.scheduler import Scheduler  # noqa: E402
from ultraplane.workloads import QueuedJob  # noqa: E402

SEED = 7
VERBOSE = '--verbose' in sys.argv
NO_EVENTS = '--no-events' in sys.argv
CONCURRENCY = 0
QUEUES: list[str] = []  # TenantQueue names the jobs use, round robin (--queues)
SIZES = (1, 2, 4, 8, 16, 36, 72, 144)
WEIGHTS = (0.30, 0.25, 0.20, 0.12, 0.08, 0.03, 0.015, 0.005)


BIG_SIZES = (1, 4, 16, 36, 72, 144, 288, 576)
BIG_WEIGHTS = (0.10, 0.15, 0.20, 0.20, 0.15, 0.15, 0.04, 0.01)
US_PER_BLOCK = 32


def sizes_that_fit(n: int, chips: int, rng: random.Random, fill: float,
                   sizes: tuple[int, ...] = SIZES,
                   weights: tuple[float, ...] = WEIGHTS) -> list[int]:
    out = rng.choices(sizes, weights, k=n)
    while sum(out) > chips * fill:  # shrink the largest until the set fits
        i = max(range(n), key=out.__getitem__)
        out[i] = sizes[max(0, sizes.index(out[i]) - 1)]
    return out


def spec(size: int) -> dict[str, Any]:
    # up to one UltraServer: inside its NeuronSwitch domain; larger: the nearest EFA block
    return {"topology": {"requiredLevel": "ultraserver"}} if 36 <= size <= 144 else {}


def baseline(sizes: list[int], ultraservers: int) -> float:
    sched = Scheduler(Allocator(build_fleet("trn3-gen2", ultraservers)))
    for i, size in enumerate(sizes):
        level = "ultraserver" if 36 <= size <= 144 else None
        sched.submit(QueuedJob(JobKey(f"j{i}"), PlacementRequest(size, required_level=level),
                               0, i))
    t0 = time.perf_counter()
    admitted = len(sched.cycle().admitted)
    return admitted / (time.perf_counter() - t0)


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
_REQUESTS = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


def write_counts(env: KubeEnv) -> dict[str, float]:
    """Mutating requests the API server has answered so far, by resource[/subresource]."""
    text = env.kubectl("get", "--raw", "/metrics").stdout
    out: dict[str, float] = {}
    for m in _REQUESTS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("verb") in WRITE_VERBS:
            what = labels.get("resource", "") + (f"/{labels['subresource']}"
                                                 if labels.get("subresource") else "")
            out[what] = out.get(what, 0.0) + float(m["value"])
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v > before.get(k, 0.0)}


def process_rss_mb(name: str) -> float:
    """Resident memory of the first process whose command line starts with `name`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            if Path(argv0).name == name:
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return 0.0


class Watcher(threading.Thread):
    """Records when each job is first seen Admitted (client side), as an informer would: one
    list, then a watch resumed from the last resourceVersion (re-listing only on 410 Gone).

    Why not a fresh watch per reconnect: a watch without a resourceVersion starts by replaying
    every object, and once thousands exist that replay outlasts a short watch timeout, so the
    watcher would never reach the new events."""

    def __init__(self, h: Harness) -> None:
        super().__init__(daemon=True)
        self.h, self.stop = h, threading.Event()
        self.admitted: dict[str, float] = {}

    def _see(self, obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase") in ("Admitted", "Running"):
            self.admitted.setdefault(obj["metadata"]["name"], time.monotonic())

    def run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        rv: str | None = None
        while not self.stop.is_set():
            try:
                if rv is None:
                    listed = self.h.api.list_namespaced_custom_object(GROUP, VERSION, self.h.ns,
                                                                      "trainingjobs")
                    for obj in listed["items"]:
                        self._see(obj)
                    rv = listed["metadata"]["resourceVersion"]
                for ev in watch.Watch().stream(
                        self.h.api.list_namespaced_custom_object, GROUP, VERSION, self.h.ns,
                        "trainingjobs", resource_version=rv, timeout_seconds=30,
                        allow_watch_bookmarks=True):
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    self._see(obj)
                    if self.stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                time.sleep(0.2)
            except Exception:
                time.sleep(0.2)


def create_all(h: Harness, jobs: list[tuple[str, int, int]],
               answered: dict[str, float] | None = None) -> dict[str, float]:
    """Creates the jobs from 16 threads; returns when each create call started (and fills
    `answered` with when each call returned)."""
    created: dict[str, float] = {}

    def one(job: tuple[str, int, int]) -> None:
        name, size, prio = job
        extra = ({"queueName": QUEUES[sum(map(ord, name)) % len(QUEUES)]} if QUEUES else {})
        created[name] = time.monotonic()
        h.job(name, size, prio, **spec(size), **extra)
        if answered is not None:
            answered[name] = time.monotonic()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, jobs))
    return created


def make_queues(env: KubeEnv, count: int, chips: int) -> None:
    """`count` TenantQueues of one cohort sharing `chips` equally; the jobs name them."""
    import yaml

    for i in range(count):
        name = f"bench-q{i}"
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TenantQueue",
               "metadata": {"name": name},
               "spec": {"nominal": {"trn3-gen2": chips // count}, "cohort": "bench"}}
        env.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
        QUEUES.append(name)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_fleet(env: KubeEnv, ns: str, count: int, logdir: Path) -> Harness:
    env.kubectl("create", "namespace", ns)
    h = Harness(env, ns, logdir)

    def one(i: int) -> None:
        block = i // US_PER_BLOCK
        h.ultraserver(f"{ns}-{i:04d}", network=[f"block-{block:03d}", f"spine-{block // 16}"])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    start_operator(h)
    # The operator's start-up round writes each UltraServer's first (empty) view; let it land
    # before a phase counts writes, or part of it is charged to the admissions that follow.
    h.wait("every UltraServer's first view", lambda: all(
        (u.get("status") or {}).get("capacity") for u in h.api.list_cluster_custom_object(
            GROUP, VERSION, "ultraservers",
            label_selector=f"ultraplane.dev/fleet={ns}")["items"]), timeout=600)
    return h


def start_operator(h: Harness) -> float:
    """Starts the operator; returns the seconds from its start to its first admission cycle."""
    t0 = time.monotonic()
    h.start(*(["--verbose"] if VERBOSE else []), *(["--no-events"] if NO_EVENTS else []),
            *(["--concurrency", str(CONCURRENCY)] if CONCURRENCY else []))
    while time.monotonic() - t0 < 600:
        if "first admission cycle" in h.log_tail(400):
            return time.monotonic() - t0
        if h.proc is not None and h.proc.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{h.log_tail()}")
        time.sleep(0.1)
    raise RuntimeError(f"no admission cycle 600 s after start:\n{h.log_tail()}")


_CYCLES = re.compile(r"admission cycles: (\d+) in \d+s; decide p50 ([\d.]+)s p99 ([\d.]+)s; "
                     r"with writes p50 ([\d.]+)s p99 ([\d.]+)s; "
                     r"collector \d+ pauses, max ([\d.]+)s, total ([\d.]+)s")


def cycle_summaries(h: Harness) -> list[tuple[float, ...]]:
    path = h.logdir / f"operator-{h.ns}-{h.starts}.log"
    return [tuple(float(x) for x in m.groups()) for m in
            _CYCLES.finditer(path.read_text(errors="replace"))]


def cycle_figures(h: Harness, skip: int = 0) -> dict[str, float]:
    """The worst periodic cycle summary the operator logged after its first `skip` ones."""
    rows = cycle_summaries(h)[skip:]
    if not rows:
        return {}
    return {"cycles": sum(r[0] for r in rows), "decide_p50_s": max(r[1] for r in rows),
            "decide_p99_s": max(r[2] for r in rows), "cycle_p50_s": max(r[3] for r in rows),
            "cycle_p99_s": max(r[4] for r in rows), "gc_pause_max_s": max(r[5] for r in rows),
            "gc_pause_total_s": round(sum(r[6] for r in rows), 3)}


def phase1(env: KubeEnv, logdir: Path, n_us: int, n_jobs: int, *,
           big: bool = False) -> dict[str, Any]:
    rng = random.Random(SEED)
    if big:  # more than the fleet holds: most run, the rest wait
        sizes = sizes_that_fit(n_jobs, n_us * 144, rng, 1.25, BIG_SIZES, BIG_WEIGHTS)
    else:
        sizes = sizes_that_fit(n_jobs, n_us * 144, rng, 0.92)
    base = baseline(sizes, n_us)
    ceiling = create_ceiling(env, logdir, sizes)
    h = run_fleet(env, "bench1", n_us, logdir)
    watcher = Watcher(h)
    watcher.start()
    before = write_counts(env)
    t0 = time.monotonic()
    answered: dict[str, float] = {}
    created = create_all(h, [(f"j{i:05d}", s, 0) for i, s in enumerate(sizes)], answered)
    t_created = time.monotonic() - t0
    deadline = time.monotonic() + 900
    while len(watcher.admitted) < n_jobs and time.monotonic() < deadline:
        time.sleep(0.5)
        if time.monotonic() - max(watcher.admitted.values(), default=t0) > 30:
            break  # nothing new for 30 s: the rest wait for chips (or do not fit)
    last = max(watcher.admitted.values())
    time.sleep(6.0)  # one UltraServer status interval: those writes belong to these admissions
    writes = delta(write_counts(env), before)
    lat = sorted(watcher.admitted[n] - created[n] for n in watcher.admitted if n in created)
    rate = len(lat) / (last - t0)
    total_writes = sum(writes.values())
    churn = churn_cycles(h, watcher, seconds=40 if big else 20)
    watcher.stop.set()
    h.kill9()
    startup = start_operator(h)
    time.sleep(2.0)
    rss = rss_mb(h.proc.pid) if h.proc else 0.0
    api_rss = process_rss_mb("kube-apiserver")
    etcd_rss = process_rss_mb("etcd")
    h.stop()
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(f"phase 1: {n_us} UltraServers ({n_us * 144} chips), {n_jobs} jobs ({sum(sizes)} chips)"
          f" created in {t_created:.1f}s; {len(lat)} admitted in {last - t0:.1f}s")
    print(f"  operator: {rate:.0f} admissions/s, p50 {statistics.median(lat):.2f}s, "
          f"p99 {p99:.2f}s")
    print("  " + where_the_time_goes(created, answered, watcher.admitted, t0))
    print(f"  API server writes during the phase: {total_writes} = "
          f"{total_writes / len(lat):.3f} per admission; by resource: {writes}")
    print(f"  baseline (pure Scheduler, same jobs, no API server): {base:.0f} admissions/s; "
          f"operator/baseline = {rate / base:.3f}")
    print(f"  ceiling (the same creates, no operator running): {ceiling:.0f} creates/s; "
          f"operator admissions/ceiling = {rate / ceiling:.2f}")
    print(f"  churn (jobs finishing, waiting jobs admitted): {churn}")
    print(f"  restart (kill -9, then list + rebuild + first cycle): {startup:.1f}s; operator "
          f"peak RSS {rss:.0f} MB; kube-apiserver RSS {api_rss:.0f} MB, etcd {etcd_rss:.0f} MB")
    return {"jobs": len(lat), "admissions_per_s": round(rate, 1),
            "p50_s": round(statistics.median(lat), 3), "p99_s": round(p99, 3),
            "writes_per_admission": round(total_writes / len(lat), 3),
            "events_written": writes.get("events", 0),
            "ultraserver_writes": writes.get("ultraservers/status", 0),
            "create_only_per_s": round(ceiling, 1),
            "admissions_vs_create_only": round(rate / ceiling, 3),
            "fleet_chips": n_us * 144, "startup_s": round(startup, 2),
            "cycle_p99_s": churn.get("cycle_p99_s"), "decide_p99_s": churn.get("decide_p99_s"),
            "gc_pause_max_s": churn.get("gc_pause_max_s"),
            "rss_mb": round(rss, 1), "apiserver_rss_mb": round(api_rss, 1),
            "etcd_rss_mb": round(etcd_rss, 1), "baseline_admissions_per_s": round(base, 1)}


def where_the_time_goes(created: dict[str, float], answered: dict[str, float],
                        admitted: dict[str, float], t0: float) -> str:
    """The latency split at the create call's answer (the API server's own create latency,
    then the operator's part: watch, cycle, status write, and the client's watch), and its
    p99 per 5 s of creation time: which part and which moment make the tail."""
    names = [n for n in admitted if n in created and n in answered]
    create = sorted(answered[n] - created[n] for n in names)
    after = sorted(admitted[n] - answered[n] for n in names)
    buckets: dict[int, list[float]] = {}
    for n in names:
        buckets.setdefault(int((created[n] - t0) // 5), []).append(admitted[n] - created[n])
    per = " ".join(f"{5 * b}s:{sorted(v)[int(0.99 * (len(v) - 1))]:.1f}"
                   for b, v in sorted(buckets.items()))
    q = lambda v, f: v[int(f * (len(v) - 1))] if v else 0.0  # noqa: E731
    return (f"create call p50 {q(create, .5):.2f}s p99 {q(create, .99):.2f}s; answered -> seen "
            f"Admitted p50 {q(after, .5):.2f}s p99 {q(after, .99):.2f}s; p99 by creation time: "
            f"{per}")


def churn_cycles(h: Harness, watcher: Watcher, seconds: float) -> dict[str, float]:
    """Finish admitted jobs at a steady pace (as the simulator would) so waiting jobs are
    admitted, and read the operator's own cycle summaries over that time."""
    names = sorted(watcher.admitted)
    random.Random(SEED + 2).shuffle(names)
    time.sleep(6.0)  # close the summary interval of the burst: churn figures start after it
    skip = len(cycle_summaries(h))
    t0 = time.monotonic()
    finished = 0
    while time.monotonic() - t0 < seconds and finished < len(names):
        h.set_status(names[finished], {"phase": "Succeeded"})
        finished += 1
        time.sleep(0.05)
    time.sleep(6.0)  # the summary interval (ULTRAPLANE_CYCLE_STATS_SECONDS=5)
    return {"finished": finished, **cycle_figures(h, skip)}


def phase3(env: KubeEnv, logdir: Path, waiting: int) -> dict[str, Any]:
    """Fairness at depth: `waiting` whole-UltraServer jobs wait; small jobs that fit now must
    not wait behind them, and queue positions follow a change within seconds."""
    ns = "bench3"
    h = run_fleet(env, ns, 4, logdir)
    for i in range(4):  # every UltraServer but 4 chips busy
        h.job(f"hold{i}", 140, 100, topology={"requiredLevel": "ultraserver"})
    for i in range(4):
        h.phase(f"hold{i}", "Admitted", timeout=60)
    create_all(h, [(f"w{i:05d}", 144, 0) for i in range(waiting)])

    def positioned(name: str, want: int | None = None) -> bool:
        pos = (h.get(name).get("status") or {}).get("queuePosition")
        return pos is not None and (want is None or pos == want)

    h.wait("positions written", lambda: positioned(f"w{waiting - 1:05d}"), timeout=300)
    probes = []
    for i in range(10):
        t0 = time.monotonic()
        h.job(f"probe{i}", 2, 0)
        h.phase(f"probe{i}", "Admitted", timeout=60)
        probes.append(time.monotonic() - t0)
        h.set_status(f"probe{i}", {"phase": "Succeeded"})  # done: its chips for the next probe
    first = min((j for j in h.jobs() if (j.get("status") or {}).get("queuePosition") == 1),
                key=lambda j: j["metadata"]["name"])["metadata"]["name"]
    second = next(j["metadata"]["name"] for j in h.jobs()
                  if (j.get("status") or {}).get("queuePosition") == 2)
    t0 = time.monotonic()
    h.delete(first)
    h.wait("the next job at the head", lambda: positioned(second, 1), timeout=60)
    moved_s = time.monotonic() - t0
    h.stop()
    print(f"phase 3: {waiting} jobs waiting; a 2-chip job that fits now admitted in "
          f"median {statistics.median(probes):.2f}s, max {max(probes):.2f}s; queue position "
          f"rewritten {moved_s:.2f}s after the head left")
    return {"depth_waiting": waiting, "depth_admit_p50_s": round(statistics.median(probes), 3),
            "depth_admit_max_s": round(max(probes), 3), "position_update_s": round(moved_s, 2)}


def create_ceiling(env: KubeEnv, logdir: Path, sizes: list[int]) -> float:
    """Creates/s of the same jobs by the same 16 clients with no operator: on a small machine
    the API server's intake, not the operator, bounds admissions/s (each admission costs the
    operator a finalizer patch, a status patch and an Event on top of the create)."""
    env.kubectl("create", "namespace", "bench0")
    h = Harness(env, "bench0", logdir)
    t0 = time.monotonic()
    create_all(h, [(f"j{i:05d}", s, 0) for i, s in enumerate(sizes)])
    rate = len(sizes) / (time.monotonic() - t0)
    # one server-side deletecollection (no namespace controller runs on this tier)
    h.api.delete_collection_namespaced_custom_object(GROUP, VERSION, "bench0", "trainingjobs")
    return rate


def phase2(env: KubeEnv, logdir: Path, n_us: int) -> None:
    rng = random.Random(SEED + 1)
    sizes = sizes_that_fit(4 * n_us * 20, 2 * n_us * 144, rng, 1.0)
    prios = [rng.choice((0, 5, 10)) for _ in sizes]
    h = run_fleet(env, "bench2", n_us, logdir)
    watcher = Watcher(h)
    watcher.start()
    stop = threading.Event()

    def finisher() -> None:
        seen: dict[str, float] = {}
        while not stop.is_set():
            now = time.monotonic()
            for name, t in list(watcher.admitted.items()):
                if name not in seen and now - t > 1.0:
                    seen[name] = now
                    h.set_status(name, {"phase": "Succeeded"})
            time.sleep(0.2)

    fin = threading.Thread(target=finisher, daemon=True)
    fin.start()
    t0 = time.monotonic()
    create_all(h, [(f"q{i:05d}", s, p) for i, (s, p) in enumerate(zip(sizes, prios, strict=True))])
    deadline = time.monotonic() + 300
    while len(watcher.admitted) < len(sizes) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop.set()
    watcher.stop.set()
    print(f"phase 2: {len(sizes)} jobs ({sum(sizes)} chips, 2x the {n_us * 144}-chip fleet), "
          f"{len(watcher.admitted)} admitted in {time.monotonic() - t0:.1f}s")
    for prio in (10, 5, 0):
        times = [watcher.admitted[f"q{i:05d}"] - t0 for i, p in enumerate(prios)
                 if p == prio and f"q{i:05d}" in watcher.admitted]
        if times:
            print(f"  priority {prio:>2}: {len(times)} admitted, mean admission at "
                  f"{statistics.mean(times):.1f}s, median {statistics.median(times):.1f}s")
    h.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="operator debug log")
    parser.add_argument("--no-events", action="store_true",
                        help="run the operator without Kubernetes Events (to see their cost)")
    parser.add_argument("--quick", action="store_true", help="32 UltraServers, 500 jobs")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="the operator's --concurrency (status writes in flight; default its own)")
    parser.add_argument("--phase1-only", action="store_true", help="skip phases 2 and 3")
    parser.add_argument("--phase3-only", action="store_true",
                        help="only the queue-depth phase (to study it; the full run is the figure)")
    parser.add_argument("--fleet-chips", type=int, default=0,
                        help="fleet size in chips (Gen2 UltraServers of 144), e.g. 1000000 with "
                             "20,000 jobs; skips phases 2 and 3")
    parser.add_argument("--queues", type=int, default=0,
                        help="the jobs name this many TenantQueues of one cohort (0: none)")
    parser.add_argument("--no-gc-freeze", action="store_true",
                        help="leave the operator's collector on CPython's schedule (to see what "
                             "freezing the heap after each cycle saves; operator/gctuning.py)")
    args = parser.parse_args()
    global CONCURRENCY
    CONCURRENCY = args.concurrency
    os.environ["ULTRAPLANE_CYCLE_STATS_SECONDS"] = "5"
    if args.no_gc_freeze:
        os.environ["ULTRAPLANE_GC_FULL_SECONDS"] = "0"
    big = args.fleet_chips > 0
    if big:
        n_us, n_jobs = -(-args.fleet_chips // 144), 20_000
    else:
        n_us, n_jobs = (32, 500) if args.quick else (256, 5000)
    workdir = Path(tempfile.mkdtemp(prefix="ultraplane-bench-"))
    env = KubeEnv(bin_dir=find_binaries(), workdir=workdir)
    env.start()
    try:
        env.apply_crds()
        if args.queues > 0:
            make_queues(env, args.queues, n_us * 144)
        if args.phase3_only:
            print(json.dumps(phase3(env, workdir, 500 if args.quick else 5000)))
            return
        figures = phase1(env, workdir, n_us, n_jobs, big=big)
        if not (args.phase1_only or big):
            phase2(env, workdir, 8 if args.quick else 32)
            figures.update(phase3(env, workdir, 500 if args.quick else 5000))
    finally:
        env.stop()
        env.drop_data()
        print(f"logs in {workdir}")

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(f"targets: >= 100 admissions/s ({verdict(figures['admissions_per_s'] >= 100)}), "
          f"p99 <= 2 s ({verdict(figures['p99_s'] <= 2)}), "
          f"writes/admission <= 2.0 ({verdict(figures['writes_per_admission'] <= 2.0)})")
    if big:
        print(f"fleet targets: start-up <= 60 s ({verdict(figures['startup_s'] <= 60)}), "
              f"cycle p99 <= 1 s ({verdict((figures['cycle_p99_s'] or 99) <= 1)}), "
              f"operator RSS <= 1536 MB ({verdict(figures['rss_mb'] <= 1536)})")
    elif "depth_admit_max_s" in figures:
        print(f"depth targets: a job that fits admitted <= 2 s with {figures['depth_waiting']} "
              f"waiting ({verdict(figures['depth_admit_max_s'] <= 2)}), position written <= 5 s "
              f"({verdict(figures['position_update_s'] <= 5)})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
