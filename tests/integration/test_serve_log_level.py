"""`ultraplane serve --log-level` as a user runs it: a real process, uvicorn's own lines shown
at info and not at the default (warning), the banner saying job times are simulated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.served import Served

STARTED = "Application startup complete"  # uvicorn logs it at info before it serves


@pytest.mark.parametrize(("args", "shown"), [
    (("--log-level", "info"), True),
    ((), False),
    (("-v",), True),
])
def test_serve_logs_at_the_level_asked(tmp_path: Path, args: tuple[str, ...],
                                       shown: bool) -> None:
    served = Served(f"sqlite:///{tmp_path / 'u.db'}", tmp_path / "serve.log", args=args)
    served.start()  # returns once /readyz answers: startup is complete by then
    try:
        log = served.log.read_text(errors="replace")
    finally:
        served.stop()
    assert (STARTED in log) is shown, log[-2000:]
    assert "job times are simulated" in log
    assert served.tracebacks() == 0
