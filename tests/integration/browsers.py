"""A real `ultraplane serve` and a real headless Chromium for the browser tests.

The browser is Debian's `chromium` package (`/usr/bin/chromium`, or `ULTRAPLANE_CHROMIUM`),
driven by Playwright from PyPI with `executable_path`: Playwright's own browser download is
never used, so the tests run on a machine that reaches only package registries. Without the
browser or Playwright the tests skip with the reason; `ULTRAPLANE_REQUIRE_BROWSER=1` (set by
`.ci/run`) makes that a failure. Every page is opened in a context that refuses, and records,
any request to a host other than the server under test: the dashboard and the API docs must
work with no internet, so an attempt to reach one is a test failure, not a slow page.
Screenshots go to `build/artifacts/screenshots/` (CI keeps that folder).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import require_or_skip
from tests.integration.kube_tier import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "artifacts" / "screenshots"
REQUIRE = "ULTRAPLANE_REQUIRE_BROWSER"


def chromium_path() -> str:
    """Debian's chromium, else a skip (a failure when CI requires the browser tier)."""
    path = os.environ.get("ULTRAPLANE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        require_or_skip(REQUIRE, "the browser tests need Debian's chromium "
                                 "(apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require_or_skip(REQUIRE, "the browser tests need Playwright (pip install -e '.[dev]')")
    return path


@contextmanager
def served(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`ultraplane serve` (real uvicorn) on a free loopback port; yields its base URL."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    command = [sys.executable, "-m", "ultraplane.cli", "serve", "--port", str(port),
               "--db", f"sqlite:///{tmp_path / f'serve-{port}.db'}", *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ultraplane serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"ultraplane serve not ready in 60 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Offline:
    """Routes every request of a browser context: loopback goes through, anything else is
    refused and remembered in `attempts`."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def __call__(self, route: Any) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if route.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            self.attempts.append(route.request.url)
            route.abort()


@contextmanager
def offline_page(browser: Any, name: str, *, full_page: bool = True
                 ) -> Iterator[tuple[Any, Offline, list[str]]]:
    """A page in a fresh context (own sessionStorage) that may reach only loopback; yields
    the page, its request log and its console errors; a screenshot `name`.png is saved at
    the end, pass or fail."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offline = Offline()
    context.route("**/*", offline)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield page, offline, errors
    finally:
        screenshot(page, name, full_page=full_page)
        context.close()


def screenshot(page: Any, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    try:
        page.screenshot(path=str(path), full_page=full_page)
    except Exception as exc:  # a screenshot is evidence, never the reason a test fails
        print(f"screenshot {name} failed: {exc}")
    return path


def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll `check` until it returns a truthy value; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's headless chromium under Playwright (skip or fail as `chromium_path` says)."""
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            browser.close()
