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

    python bench/api.py [--seconds 5] [--concurrency 16]

Ends with ONE JSON line:
{"read_rps":..., "read_p99_ms":..., "dryrun_rps":..., "dryrun_p99_ms":..., ...}
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
from pathlib import Path

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


async def worker(port: int, payload: bytes, deadline: float, limit: int,
                 latencies: list[float], errors: list[int]) -> None:
    """One keep-alive connection sending requests back to back until the deadline or limit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline and len(latencies) < limit:
            start = time.perf_counter()
            writer.write(payload)
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
                errors.append(code)
    finally:
        writer.close()


async def phase(port: int, call: tuple[str, str, str | None], seconds: float,
                concurrency: int, limit: int) -> dict[str, float]:
    payload = request_bytes(*call, port)
    latencies: list[float] = []
    errors: list[int] = []
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(worker(port, payload, deadline, limit, latencies, errors)
                           for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50_ms": p(0.50), "p99_ms": p(0.99), "errors": len(errors)}


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
    args = parser.parse_args()

    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="ultraplane-bench-"))
    cmd = [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(port),
           "--db", f"sqlite:///{tmp / 'bench.db'}", "--no-demo", "--time-scale", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_ready(port, proc)
        load_fleet(port)
        results = {}
        for name, call in (("baseline", BASELINE), ("read", READ), ("capacity", CAPACITY),
                           ("dryrun", DRYRUN), ("preempt", DRYRUN_PREEMPT)):
            results[name] = asyncio.run(phase(port, call, args.seconds, args.concurrency, args.limit))
            r = results[name]
            print(f"{name:9s} {call[0]:4s} {call[1]:24s} {r['requests']:7d} req  "
                  f"{r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
                  f"errors {r['errors']}")
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
        "errors": sum(int(r["errors"]) for r in results.values()),
    }))


if __name__ == "__main__":
    main()
