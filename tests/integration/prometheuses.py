"""A throwaway Prometheus server (Debian's `prometheus` package) scraping given targets.

Why a real one: the operator's Prometheus path must read what a real server stores from the
simulated model servers (its range vectors, sample timestamps, label handling), not what a
fake of its HTTP API would say. Targets are a file_sd file the test rewrites; scrapes every
second. Where the binary is missing the test skips with the reason, and fails instead when
`ULTRAPLANE_REQUIRE_PROMETHEUS=1` (CI installs the package).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import require_or_skip

REQUIRE = "ULTRAPLANE_REQUIRE_PROMETHEUS"

CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vllm
    scrape_interval: 1s
    scrape_timeout: 900ms
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 1s
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, url: str, targets: Path) -> None:
        self.url = url
        self.targets = targets

    def scrape(self, targets: Iterable[tuple[str, Mapping[str, str]]]) -> None:
        """Scrape these `host:port` targets, each with its labels."""
        groups = [{"targets": [t], "labels": dict(labels)} for t, labels in targets]
        tmp = self.targets.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets)  # atomic: Prometheus never reads half a file

    def get(self, path: str) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as r:
            body: dict[str, object] = json.loads(r.read())
            return body

    def up(self) -> int:
        """Targets whose last scrape succeeded."""
        data = self.get("/api/v1/targets")["data"]
        assert isinstance(data, dict)
        return sum(1 for t in data["activeTargets"] if t["health"] == "up")


@contextmanager
def prometheus_server() -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        require_or_skip(REQUIRE, "the prometheus binary is not installed "
                                 "(apt-get install prometheus)")
    tmp = Path(tempfile.mkdtemp(prefix="ultraplane-prom-"))
    targets = tmp / "targets.json"
    targets.write_text("[]")
    (tmp / "prometheus.yml").write_text(CONFIG.format(targets=json.dumps(str(targets))))
    port = _free_port()
    log = (tmp / "log").open("w")
    proc = subprocess.Popen(
        [str(binary), f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}", targets)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("Prometheus did not start:\n"
                                         + (tmp / "log").read_text()) from None
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
