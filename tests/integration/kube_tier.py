"""Starts a real etcd + kube-apiserver (no nodes) for the integration tier.

Why not a mock: what the operator must get right (schema validation and pruning, CEL rules,
the status subresource, resourceVersion conflicts, finalizers, watch resumption) is
behaviour of the real API server, so this tier runs the real one, built by
``hack/envtest.sh``. Everything lives in one temporary directory: certificates made with the
``openssl`` CLI, etcd data, a static admin token (group ``system:masters``), the
service-account keys, the kubeconfig and the two server logs.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ENVTEST_SCRIPT = REPO / "hack" / "envtest.sh"
CRDS_DIR = REPO / "crds"


class TierUnavailable(RuntimeError):
    """The binaries cannot be provided on this machine (no Go, no openssl): a skip reason."""


def find_binaries(timeout: float = 3600) -> Path:
    """Runs hack/envtest.sh and returns the directory holding the three binaries.

    The first run on a machine builds kube-apiserver and etcd (about 20 minutes on two
    cores), later runs return at once from the cache.
    """
    if shutil.which("bash") is None:
        raise TierUnavailable("the real API server tier needs bash to run hack/envtest.sh")
    proc = subprocess.run(
        ["bash", str(ENVTEST_SCRIPT)], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode == 3:
        raise TierUnavailable(
            "the real API server tier needs Go to build kube-apiserver; see hack/envtest.sh"
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"hack/envtest.sh failed with exit code {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    for name in ("kube-apiserver", "etcd", "kubectl"):
        if not (bin_dir / name).is_file():
            raise RuntimeError(f"hack/envtest.sh printed {bin_dir} but {name} is not in it")
    return bin_dir


def free_port() -> int:
    """Asks the kernel for a free loopback port (a small race, acceptable for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """Runs in the child before exec: a killed pytest must not leave servers behind.

    SIGKILL, not SIGTERM: a kube-apiserver still starting up ignores SIGTERM while it
    waits for etcd, and with pytest gone nobody needs a graceful shutdown.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: teardown still stops them
        pass


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)


def make_certificates(pki: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost and the service-account keys."""
    if shutil.which("openssl") is None:
        raise TierUnavailable("the real API server tier needs the openssl CLI to make certificates")
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=ultraplane-test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", "serving.key", "-out", "serving.csr", cwd=pki)
    (pki / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "serving.crt",
             cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


@dataclass
class KubeEnv:
    """A running tier: what tests and subprocesses need to talk to it."""

    bin_dir: Path
    workdir: Path
    server: str = ""
    token: str = ""
    kubeconfig: Path = field(default_factory=Path)
    logs_dir: Path = field(default_factory=Path)
    ca_file: Path = field(default_factory=Path)
    _procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, the operator): KUBECONFIG and our PATH first."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Runs the tier's kubectl (never /usr/bin/kubectl) against this server."""
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=timeout, env=self.env(),
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr
            )
        return proc

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this server (imported lazily)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this server."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return cfg

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 120) -> None:
        self.logs_dir = self.workdir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = self.workdir / "pki"
        make_certificates(pki)
        self.ca_file = pki / "ca.crt"
        self.token = secrets.token_hex(16)
        (pki / "tokens.csv").write_text(
            f'{self.token},ultraplane-admin,ultraplane-admin,"system:masters"\n'
        )
        etcd_client, etcd_peer, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        self._spawn("etcd", [
            str(self.bin_dir / "etcd"),
            "--name=tier", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=tier=http://127.0.0.1:{etcd_peer}",
            # Test data: durability is not worth the fsyncs on a shared two-core machine.
            "--unsafe-no-fsync",
        ])
        self.server = f"https://127.0.0.1:{api_port}"
        self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # Nothing here runs pods: admission that waits for nodes or a controller manager
            # (ServiceAccount token, default storage class...) would only add noise.
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
            # The default reconciler refuses a loopback advertise address; nothing here
            # needs the `kubernetes` Service endpoints.
            "--endpoint-reconciler-type=none",
        ])
        self._wait_ready(timeout)
        self._write_kubeconfig()

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        log = (self.logs_dir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
            # Own session: a Ctrl-C reaches pytest, whose teardown stops the servers in order.
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._procs.append((name, proc))

    def _wait_ready(self, timeout: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with code {proc.returncode}; log: "
                        f"{self.logs_dir / (name + '.log')}\n{self.tail(name)}"
                    )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.25)
        raise RuntimeError(
            f"kube-apiserver not ready after {timeout:.0f}s ({last}); "
            f"logs in {self.logs_dir}\n{self.tail('kube-apiserver')}"
        )

    def _write_kubeconfig(self) -> None:
        self.kubeconfig = self.workdir / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: tier\n  cluster:\n"
            f"    server: {self.server}\n    certificate-authority: {self.ca_file}\n"
            "users:\n- name: admin\n  user:\n"
            f"    token: {self.token}\n"
            "contexts:\n- name: tier\n  context:\n    cluster: tier\n    user: admin\n"
            "    namespace: default\n"
            "current-context: tier\n"
        )
        self.kubeconfig.chmod(0o600)

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.logs_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stops the apiserver first (so it does not log etcd errors), then etcd."""
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self._procs.clear()

    def drop_data(self) -> None:
        """Deletes etcd's data (a benchmark's run leaves hundreds of MB); logs and certificates
        stay for reading. Only after `stop`."""
        assert not self._procs, "stop the servers first"
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)

    # -- CRDs --------------------------------------------------------------------------

    def apply_crds(self, crds_dir: Path = CRDS_DIR, timeout: float = 60) -> list[str]:
        """Applies every ``crds/*.yaml`` and waits until each CRD is Established."""
        files = sorted(crds_dir.glob("*.yaml")) if crds_dir.is_dir() else []
        names: list[str] = []
        for path in files:
            # Server-side: a large CRD overflows client-side apply's 256 KiB annotation.
            out = self.kubectl("apply", "--server-side", "-f", str(path), "-o", "name").stdout
            names += [n for n in out.split() if n.startswith("customresourcedefinition")]
        if names:
            self.kubectl("wait", "--for=condition=Established", f"--timeout={timeout:.0f}s",
                         *names, timeout=timeout + 30)
        return names
