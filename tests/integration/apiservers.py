"""The real app behind a real uvicorn server, in this process, on a free loopback port.

In-process so a test can reach the backend (tick it, read its lock) while clients talk
HTTP to it over real sockets, with the same server options `ultraplane serve` uses
(request deadline, connection cap, keep-alive timeout).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from ultraplane.api.app import create_app
from ultraplane.api.guards.connections import server_options
from ultraplane.api.settings import Settings

from tests.integration.kube_tier import free_port


@dataclass
class LiveServer:
    url: str
    port: int
    app: Any

    @property
    def backend(self) -> Any:
        return self.app.state.backend


@contextmanager
def live_server(settings: Settings, *, clock: Any = None) -> Iterator[LiveServer]:
    app = create_app(settings, clock=clock)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="on",
                            **server_options(read_seconds=settings.request_read_seconds,
                                             max_connections=settings.max_connections))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server under test did not start")
        time.sleep(0.01)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", port, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
