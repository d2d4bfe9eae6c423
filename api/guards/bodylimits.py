"""Request body size limit: a body over `max_bytes` gets 413 before anything parses it.

A pure ASGI middleware, so the limit holds for a declared `Content-Length` (refused
at once) and for chunked bodies (counted as they arrive, refused at the first chunk
past the limit) alike; nothing downstream ever holds more than `max_bytes`.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from ultraplane.api.errors import error_response

DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB


class BodyTooLarge(HTTPException):
    """Raised while the body streams in: an HTTPException so FastAPI's body reader passes it
    through to the error handlers (any other exception there becomes a 400)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


class BodySizeLimit:
    """Answer 413 `PayloadTooLarge` to any HTTP request whose body passes `max_bytes`."""

    def __init__(self, app: ASGIApp, *, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _refuse(self) -> object:
        return error_response(413, "PayloadTooLarge", "body",
                              f"the request body is larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse()(scope, receive, send)  # type: ignore[operator]
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse()(scope, receive, send)  # type: ignore[operator]


class SingleQueryValues:
    """Answer 422 when a query parameter is given more than once: every parameter of this API
    takes one value, and the framework would otherwise silently keep the last of them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("query_string", b"").decode("latin-1")
            keys = [key for key, _ in parse_qsl(raw, keep_blank_values=True)]
            repeated = sorted({key for key in keys if keys.count(key) > 1})
            if repeated:
                response = error_response(
                    422, "InvalidQuery", repeated[0],
                    f"query parameter {repeated[0]!r} is given more than once; it takes one value")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
