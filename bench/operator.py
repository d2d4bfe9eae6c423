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
Ends with ONE JSON line of figures (phase 1).
"""

from __future__ import annotations

import argparse
import json
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
from ultraplane.allocator import Allocator, PlacementRequest  # noqa: E402
from ultraplane.ids import JobKey  # noqa: E402
from ultraplane.scheduling import QueuedJob, Scheduler  # noqa: E402
from ultraplane.topology import build_fleet  # noqa: E402

SEED = 7
VERBOSE = '--verbose' in sys.argv
NO_EVENTS = '--no-events' in sys.argv
CONCURRENCY = 0
SIZES = (1, 2, 4, 8, 16, 36, 72, 144)
WEIGHTS = (0.30, 0.25, 0.20, 0.12, 0.08, 0.03, 0.015, 0.005)


def sizes_that_fit(n: int, chips: int, rng: random.Random, fill: float) -> list[int]:
    out = rng.choices(SIZES, WEIGHTS, k=n)
    while sum(out) > chips * fill:  # shrink the largest until the set fits
        i = max(range(n), key=out.__getitem__)
        out[i] = SIZES[max(0, SIZES.index(out[i]) - 1)]
    return out


def spec(size: int) -> dict[str, Any]:
    return {"topology": {"requiredLevel": "ultraserver"}} if size >= 36 else {}


def baseline(sizes: list[int], ultraservers: int) -> float:
    sched = Scheduler(Allocator(build_fleet("trn3-gen2", ultraservers)))
    for i, size in enumerate(sizes):
        level = "ultraserver" if size >= 36 else None
        sched.submit(QueuedJob(JobKey(f"j{i}"), PlacementRequest(size, required_level=level),
                               0, i))
    t0 = time.perf_counter()
    admitted = len(sched.cycle().admitted)
    return admitted / (time.perf_counter() - t0)


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


def create_all(h: Harness, jobs: list[tuple[str, int, int]]) -> dict[str, float]:
    created: dict[str, float] = {}

    def one(job: tuple[str, int, int]) -> None:
        name, size, prio = job
        created[name] = time.monotonic()
        h.job(name, size, prio, **spec(size))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, jobs))
    return created


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_fleet(env: KubeEnv, ns: str, count: int, logdir: Path) -> Harness:
    env.kubectl("create", "namespace", ns)
    h = Harness(env, ns, logdir)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: h.ultraserver(f"{ns}-{i:04d}"), range(count)))
    h.start(*(["--verbose"] if VERBOSE else []), *(["--no-events"] if NO_EVENTS else []),
            *(["--concurrency", str(CONCURRENCY)] if CONCURRENCY else []))
    time.sleep(3)
    return h


def phase1(env: KubeEnv, logdir: Path, n_us: int, n_jobs: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    sizes = sizes_that_fit(n_jobs, n_us * 144, rng, 0.92)
    base = baseline(sizes, n_us)
    ceiling = create_ceiling(env, logdir, sizes)
    h = run_fleet(env, "bench1", n_us, logdir)
    watcher = Watcher(h)
    watcher.start()
    t0 = time.monotonic()
    created = create_all(h, [(f"j{i:05d}", s, 0) for i, s in enumerate(sizes)])
    t_created = time.monotonic() - t0
    deadline = time.monotonic() + 600
    while len(watcher.admitted) < n_jobs and time.monotonic() < deadline:
        time.sleep(0.5)
        if time.monotonic() - max(watcher.admitted.values(), default=t0) > 30:
            break  # nothing new for 30 s: the rest do not fit (fragmentation)
    watcher.stop.set()
    lat = sorted(watcher.admitted[n] - created[n] for n in watcher.admitted if n in created)
    last = max(watcher.admitted.values())
    rate = len(lat) / (last - t0)
    rss = rss_mb(h.proc.pid) if h.proc else 0.0
    h.stop()
    print(f"phase 1: {n_us} UltraServers, {n_jobs} jobs ({sum(sizes)} chips) created in "
          f"{t_created:.1f}s; {len(lat)} admitted in {last - t0:.1f}s")
    print(f"  operator: {rate:.0f} admissions/s, p50 {statistics.median(lat):.2f}s, "
          f"p99 {lat[int(0.99 * (len(lat) - 1))]:.2f}s, peak RSS {rss:.0f} MB")
    print(f"  baseline (pure Scheduler, same jobs, no API server): {base:.0f} admissions/s; "
          f"operator/baseline = {rate / base:.3f}")
    print(f"  ceiling (the same creates, no operator running): {ceiling:.0f} creates/s; "
          f"operator admissions/ceiling = {rate / ceiling:.2f}")
    return {"jobs": len(lat), "admissions_per_s": round(rate, 1),
            "p50_s": round(statistics.median(lat), 3),
            "p99_s": round(lat[int(0.99 * (len(lat) - 1))], 3), "rss_mb": round(rss, 1),
            "baseline_admissions_per_s": round(base, 1), "create_only_per_s": round(ceiling, 1)}


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
    parser.add_argument("--phase1-only", action="store_true", help="skip the priority drain phase")
    args = parser.parse_args()
    global CONCURRENCY
    CONCURRENCY = args.concurrency
    n_us, n_jobs = (32, 500) if args.quick else (256, 5000)
    workdir = Path(tempfile.mkdtemp(prefix="ultraplane-bench-"))
    env = KubeEnv(bin_dir=find_binaries(), workdir=workdir)
    env.start()
    try:
        env.apply_crds()
        figures = phase1(env, workdir, n_us, n_jobs)
        if not args.phase1_only:
            phase2(env, workdir, 8 if args.quick else 32)
    finally:
        env.stop()
        print(f"logs in {workdir}")
    print(f"targets: >= 100 admissions/s ({'met' if figures['admissions_per_s'] >= 100 else 'MISSED'}),"
          f" p99 <= 2 s ({'met' if figures['p99_s'] <= 2 else 'MISSED'})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
