"""How `ultraplane serve` holds connections: a deadline to send each request, and a cap.

Why a protocol subclass: uvicorn closes an idle keep-alive connection (`timeout_keep_alive`)
and caps concurrent connections (`limit_concurrency`, 503 past it), but it has no deadline
for reading a request. A fresh connection that sends nothing, or a request's headers or
body sent a byte at a time, is held forever; 500 of them use up the cap and every other
client gets 503. Here a timer starts when a connection opens (and when a request's first
byte arrives) and closes the connection if the whole request (headers and body) has not
arrived `read_seconds` later, and answers 431 to a request line and headers over
`MAX_HEAD_BYTES` (uvicorn's httptools parser keeps headers without a bound). uvicorn's own
limits are kept: the cap and the keep-alive timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

KEEP_ALIVE_S = 5
MAX_INCOMPLETE_EVENT_BYTES = 16 * 1024  # h11's buffer for a request line and headers
# Request line and headers (httptools itself has no bound). Counted across reads, so a head
# that arrives whole in one read (at most 256 KiB) passes: memory stays bounded either way.
MAX_HEAD_BYTES = 64 * 1024
TOO_LARGE = (b'{"error":"RequestHeaderFieldsTooLarge","field":"headers","message":'
             b'"the request line and headers are larger than 65536 bytes"}')


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request is slower than
    `read_seconds` (set per server by `protocol_with_deadline`)."""

    read_seconds = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # bytes of the current request before its headers completed
        self._head_done = False
        self._completed = False  # a request ended within the chunk being parsed

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(self.read_seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # the first request must arrive in time too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._completed = False
        super().data_received(data)
        if self._head_done or self._completed or self.transport.is_closing():
            return  # a chunk that ended a request may hold its body: not head bytes
        # Counted after parsing: a chunk that completed the headers is not head bytes.
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: "
                b"application/json\r\nconnection: close\r\ncontent-length: "
                + str(len(TOO_LARGE)).encode() + b"\r\n\r\n" + TOO_LARGE)
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes, self._head_done = 0, False
        self._arm()

    def on_headers_complete(self) -> None:
        self._head_done = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()  # the request is all here; the app may take its time to answer
        self._head_bytes, self._head_done, self._completed = 0, False, True
        super().on_message_complete()


def protocol_with_deadline(read_seconds: float) -> type[DeadlineProtocol]:
    return type("DeadlineProtocol", (DeadlineProtocol,), {"read_seconds": read_seconds})


def server_options(*, read_seconds: float, max_connections: int) -> dict[str, Any]:
    """uvicorn.Config keyword arguments: the request deadline, the caps and timeouts."""
    return {
        "http": protocol_with_deadline(read_seconds),
        "limit_concurrency": max_connections,
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_INCOMPLETE_EVENT_BYTES,
        "timeout_graceful_shutdown": 10,
    }
