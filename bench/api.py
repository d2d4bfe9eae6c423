"""Load benchmark of `ultraplane serve` on loopback: reads and dry runs per second, p99 latency.

Starts the real server in a subprocess (embedded backend, 8 Gen2 UltraServers,
a temp SQLite store), loads a fixed half-fleet workload through the API so every
run measures the same state, then drives it with a bounded asyncio load
generator over keep-alive connections. Dry runs are measured twice: a request
that fits (placement + 2 alternatives), and one that cannot fit and goes
through the preemption planner. `/healthz`
is measured first in the same run as the baseline (the cost of the HTTP stack
alone), so the ratios show what the API itself adds.

Targets on the 2-core dev machine: >= 1,000 reads/s, >= 300 dry runs/s,
p99 <= 50 ms. Client and server share the two cores, so these are lower bounds
of what the server alone can do.

Queue depth (`--depths 1000,10000`): with the fleet loaded, that many jobs that
cannot fit now (the whole fleet each) are queued through the API, then submits
(new queued jobs), reads (GET of one queued job) and dry runs are measured with 8
clients at each depth; the empty-queue figures of the same run are the baseline.
Target: p99 <= 50 ms at every depth. `--queues FILE` runs the server with tenant
queues (`ultraplane serve --queues`); bench/api_queues.yaml puts the queued jobs in a
queue that borrows its cohort's idle half of the fleet.

The server runs without its per-client rate limits: the load generator is one client
(one address), and the bench measures what the server can do, not the limiter. Every
answer of 400 or more is an error, reported by phase and status; any error fails the
run, as a missed target does (exit status 1).

    python bench/api.py [--seconds 5] [--concurrency 8] [--depths 1000,10000] [--queues FILE]
    python bench/api.py --chaos [--quick | --chaos-seconds S]   (bench/api_chaos.py)

Ends with ONE JSON line:
{"read_rps":..., "read_p99_ms":..., "dryrun_rps":..., "dryrun_p99_ms":..., ...,
 "errors": 0, "error_statuses": {"<phase>": {"<status>": count}},
 "queue_depths": [{"queued":..., "submit_p99_ms":..., "read_p99_ms":..., "dryrun_p99_ms":...}]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

READ = ("GET", "/v1/ultraservers", None)
CAPACITY = ("GET", "/v1/capacity", None)
BASELINE = ("GET", "/healthz", None)
DRYRUN = ("POST", "/v1/placements:dryRun",
          json.dumps({"chips": 72, "requiredLevel": "ultraserver", "priority": 10, "alternatives": 2}))
# Does not fit anywhere on the loaded fleet: exercises the preemption planner.
DRYRUN_PREEMPT = ("POST", "/v1/placements:dryRun",
                  json.dumps({"chips": 576, "requiredLevel": "network-1", "priority": 10}))
# A fixed load (half the fleet, mixed gang sizes), so every run measures the same state.
WORKLOAD = [(36, "rack")] * 8 + [(16, "rack")] * 8 + [(4, "server")] * 16 + [(144, "ultraserver")] * 1
TARGETS = {"read_rps": 1000.0, "dryrun_rps": 300.0, "p99_ms": 50.0}
# The server's limits off: the load generator is one client, and the bench measures the server.
UNLIMITED = {f"ULTRAPLANE_RATE_LIMIT_{c}": "off" for c in ("DRYRUNS", "WRITES", "READS")}
QUEUED_SPEC = {"chips": 1152, "topology": {"requiredLevel": "network-1"}, "priority": 0,
               "work": {"durationSeconds": 3600}}  # the whole fleet: waits while half is busy
_names = count()
_sent = [0]


def queued_job_bytes(port: int) -> bytes:
    """A POST of one more job that will queue (a new name each time)."""
    _sent[0] += 1
    body = json.dumps({"metadata": {"name": f"q-{next(_names):06d}"}, "spec": QUEUED_SPEC})
    return request_bytes("POST", "/v1/namespaces/queue/trainingjobs", body, port)


async def fill_queue(port: int, depth: int, concurrency: int) -> dict[str, Any]:
    """Submit jobs until `depth` are queued (not timed; its errors are counted)."""
    todo = max(0, depth - _sent[0])
    return await phase(port, lambda: queued_job_bytes(port), 3600, concurrency, todo)


def depth_phases(port: int, depth: int, seconds: float, concurrency: int,
                 limit: int) -> dict[str, Any]:
    fill = asyncio.run(fill_queue(port, depth, concurrency))
    queued = _sent[0]
    read = ("GET", "/v1/namespaces/queue/trainingjobs/q-000000", None)
    # Bounded so the submit phase adds at most a tenth to the depth being measured.
    submit = asyncio.run(phase(port, lambda: queued_job_bytes(port), seconds, concurrency,
                               max(100, depth // 10)))
    got: dict[str, Any] = {"queued": queued, "fill": fill, "submit": submit,
                           "read": asyncio.run(phase(port, read, seconds, concurrency, limit)),
                           "dryrun": asyncio.run(phase(port, DRYRUN, seconds, concurrency, limit))}
    for name in ("submit", "read", "dryrun"):
        r = got[name]
        print(f"queued {queued:6d} {name:7s} {r['requests']:7d} req  {r['rps']:8.0f} req/s  "
              f"p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  {said(r)}")
    return got


def said(result: dict[str, Any]) -> str:
    """`errors 0`, or `errors 12 (429 x 10, 503 x 2)`."""
    statuses = result["statuses"]
    if not statuses:
        return "errors 0"
    return (f"errors {result['errors']} ("
            + ", ".join(f"{code} x {n}" for code, n in sorted(statuses.items())) + ")")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request_bytes(method: str, path: str, body: str | None, port: int) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
    if body is None:
        return (head + "\r\n").encode()
    data = body.encode()
    head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


Payload = bytes | Callable[[], bytes]


async def worker(port: int, payload: Payload, deadline: float, limit: int,
                 latencies: list[float], errors: Counter[int]) -> None:
    """One keep-alive connection sending requests back to back until the deadline or limit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline and len(latencies) < limit:
            data = payload() if callable(payload) else payload  # before the clock starts
            start = time.perf_counter()
            writer.write(data)
            await writer.drain()
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value.strip())
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            code = int(status_line.split()[1])
            if code >= 400:
                errors[code] += 1
    finally:
        writer.close()


async def phase(port: int, call: tuple[str, str, str | None] | Payload, seconds: float,
                concurrency: int, limit: int) -> dict[str, Any]:
    """Requests, rps, p50 and p99 latency, errors and their statuses ({status: count})."""
    payload = request_bytes(*call, port) if isinstance(call, tuple) else call
    latencies: list[float] = []
    errors: Counter[int] = Counter()
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(worker(port, payload, deadline, limit, latencies, errors)
                           for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50_ms": p(0.50), "p99_ms": p(0.99), "errors": sum(errors.values()),
            "statuses": dict(errors)}


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"ultraplane serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    sys.exit("ultraplane serve did not become ready")


def load_fleet(port: int) -> None:
    """Submit WORKLOAD (long jobs) and wait until the fleet has admitted it."""
    import urllib.request

    def call(method: str, path: str, body: dict[str, object] | None = None) -> object:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    for i, (chips, level) in enumerate(WORKLOAD):
        call("POST", "/v1/namespaces/bench/trainingjobs", {
            "metadata": {"name": f"load-{i:02d}"},
            "spec": {"chips": chips, "topology": {"requiredLevel": level},
                     "model": {"name": "llama-3-70b", "parametersBillions": 70},
                     "work": {"durationSeconds": 10 * 86_400}}})
    want = sum(chips for chips, _ in WORKLOAD)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        servers = call("GET", "/v1/ultraservers")["items"]  # type: ignore[index]
        if sum(u["allocatedChips"] for u in servers) >= want:
            return
        time.sleep(0.2)
    sys.exit("the benchmark workload was not admitted in 30 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="Duration of each phase.")
    parser.add_argument("--concurrency", type=int, default=8, help="Keep-alive connections.")
    parser.add_argument("--limit", type=int, default=50_000, help="Max requests per phase.")
    parser.add_argument("--depths", default="1000,10000",
                        help="Queue depths to measure, comma-separated ('' for none).")
    parser.add_argument("--queues", metavar="FILE", default=None,
                        help="Tenant queues for the server (`ultraplane serve --queues`), e.g. "
                             "bench/api_queues.yaml.")
    parser.add_argument("--chaos", action="store_true",
                        help="Instead: 50 clients create/delete/re-create colliding names for "
                             "60 s with kill -9 and a restart every 15 s (bench/api_chaos.py).")
    parser.add_argument("--quick", action="store_true",
                        help="With --chaos: 15 s with a kill every 7.5 s (for CI).")
    parser.add_argument("--chaos-seconds", type=float, default=None,
                        help="With --chaos: how long the clients run [default: 60, quick 15].")
    args = parser.parse_args()
    if args.chaos:
        from api_chaos import main as chaos  # beside this file (run as a script)

        seconds = args.chaos_seconds or (15.0 if args.quick else 60.0)
        chaos(seconds, clients=50, kill_every_s=7.5 if args.quick else 15.0,
              dry_seconds=5.0 if args.quick else 10.0)
        return
    depths = [int(d) for d in args.depths.split(",") if d.strip()]
    by_depth: list[dict[str, Any]] = []

    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="ultraplane-bench-"))
    cmd = [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(port),
           "--db", f"sqlite:///{tmp / 'bench.db'}", "--no-demo", "--time-scale", "60"]
    if args.queues:
        cmd += ["--queues", args.queues]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **UNLIMITED, "PYTHONUNBUFFERED": "1"})
    try:
        wait_ready(port, proc)
        load_fleet(port)
        results: dict[str, dict[str, Any]] = {}
        for name, call in (("baseline", BASELINE), ("read", READ), ("capacity", CAPACITY),
                           ("dryrun", DRYRUN), ("preempt", DRYRUN_PREEMPT)):
            results[name] = asyncio.run(phase(port, call, args.seconds, args.concurrency, args.limit))
            r = results[name]
            print(f"{name:9s} {call[0]:4s} {call[1]:24s} {r['requests']:7d} req  "
                  f"{r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
                  f"{said(r)}")
        for depth in depths:
            by_depth.append(depth_phases(port, depth, args.seconds, args.concurrency, args.limit))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    base = results["baseline"]["rps"]
    print(f"read / baseline throughput: {results['read']['rps'] / base:.2f}x; "
          f"dry run / baseline: {results['dryrun']['rps'] / base:.2f}x")
    verdicts = {
        "reads >= 1,000/s": results["read"]["rps"] >= TARGETS["read_rps"],
        "dry runs >= 300/s": results["dryrun"]["rps"] >= TARGETS["dryrun_rps"],
        "read p99 <= 50 ms": results["read"]["p99_ms"] <= TARGETS["p99_ms"],
        "dry-run p99 <= 50 ms": results["dryrun"]["p99_ms"] <= TARGETS["p99_ms"],
    }
    rows = [{"queued": d["queued"],
             **{f"{k}_p99_ms": round(d[k]["p99_ms"], 2) for k in ("submit", "read", "dryrun")},
             **{f"{k}_rps": round(d[k]["rps"], 1) for k in ("submit", "read", "dryrun")}}
            for d in by_depth]
    for row in rows:
        worst = max(float(row[f"{k}_p99_ms"]) for k in ("submit", "read", "dryrun"))
        verdicts[f"p99 <= 50 ms with {row['queued']} queued"] = worst <= TARGETS["p99_ms"]
        print(f"queued {row['queued']}: read p99 / empty-queue read p99 = "
              f"{float(row['read_p99_ms']) / max(0.01, results['read']['p99_ms']):.2f}x; "
              f"dry-run p99 ratio {float(row['dryrun_p99_ms']) / max(0.01, results['dryrun']['p99_ms']):.2f}x")
    # every phase's errors by status, the depth phases' named by their depth
    phases = dict(results)
    for d in by_depth:
        phases.update({f"{k}@{d['queued']}": d[k] for k in ("fill", "submit", "read", "dryrun")})
    statuses = {name: {str(code): n for code, n in sorted(r["statuses"].items())}
                for name, r in phases.items() if r["statuses"]}
    errors = sum(int(r["errors"]) for r in phases.values())
    verdicts["no errors"] = errors == 0
    for what, ok in verdicts.items():
        print(f"target {what}: {'met' if ok else 'MISSED'}")
    print(json.dumps({
        "read_rps": round(results["read"]["rps"], 1),
        "read_p99_ms": round(results["read"]["p99_ms"], 2),
        "dryrun_rps": round(results["dryrun"]["rps"], 1),
        "dryrun_p99_ms": round(results["dryrun"]["p99_ms"], 2),
        "capacity_rps": round(results["capacity"]["rps"], 1),
        "preempt_dryrun_rps": round(results["preempt"]["rps"], 1),
        "preempt_dryrun_p99_ms": round(results["preempt"]["p99_ms"], 2),
        "baseline_healthz_rps": round(base, 1),
        "concurrency": args.concurrency,
        "queues": args.queues,
        "errors": errors,
        "error_statuses": statuses,
        "queue_depths": rows,
    }))
    if not all(verdicts.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
