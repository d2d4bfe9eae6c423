"""hack/kind-cluster.sh refuses early, with one sentence and exit code 2, what it cannot do."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "kind-cluster.sh"


def run(*args: str, user: str | None = None, home: Path | None = None,
        script: Path = SCRIPT) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"]}
    if home is not None:
        env |= {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    command = ["bash", str(script), *args]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_an_unknown_command_is_named_with_the_commands_there_are(tmp_path: Path) -> None:
    result = run("start", home=tmp_path)
    assert result.returncode == 2
    assert "unknown command 'start'" in result.stderr and "up, down" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_user_who_may_not_use_docker_is_told_what_to_do() -> None:
    if os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/var/run/docker.sock").is_socket():
        pytest.skip("needs root, runuser and a Docker socket, to run the script as a user without access")
    home = Path(tempfile.mkdtemp(prefix="ultraplane-kind-user-"))
    try:
        home.chmod(0o777)
        # A copy the user can read (a checkout may sit in a directory only root can enter).
        copy = home / "hack"
        shutil.copytree(SCRIPT.parent / "lib", copy / "lib")
        shutil.copy(SCRIPT, copy / SCRIPT.name)
        for path in (copy, copy / "lib", *copy.rglob("*")):
            path.chmod(0o755)
        result = run("up", user="nobody", home=home, script=copy / SCRIPT.name)
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert "may not use it" in last and "docker group" in last, last
        assert not list((home / "cache").rglob("cluster-*.yaml")), "nothing was started"
    finally:
        shutil.rmtree(home)


def test_a_cache_directory_it_cannot_write_is_named(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    result = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                                 "XDG_CACHE_HOME": str(blocked)}, check=False)
    assert result.returncode == 2
    assert f"cannot create the cache directory {blocked}/ultraplane/kind" in result.stderr
