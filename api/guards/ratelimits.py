"""Per-client rate limits: 429 with Retry-After, counted by the `limits` library.

Why a middleware of our own around `limits` rather than slowapi: the limit must hold for
every route (the routers are built by functions, and slowapi wants a decorator per route),
and the client key needs the app's own token table. `limits` does the counting (fixed
windows in memory, expired by the library).

A client is its bearer token's name when the token is one of the static tokens, else its
address: a made-up token buys no fresh budget. Requests are counted by class, each with its
own limit (`Settings.rate_limit_*`), so a client's dry runs never use up its reads:

- `dryruns`: `POST /v1/placements:dryRun` (CPU per request);
- `writes`: every other POST, PUT, PATCH and DELETE;
- `reads`: everything else, except the probes and metrics, which are never limited.
"""

from __future__ import annotations

import hmac
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter
from starlette.types import ASGIApp, Receive, Scope, Send
from ultraplane.api.errors import error_response

UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
WORDS = {"dryruns": "dry runs", "writes": "writes", "reads": "reads"}


@dataclass(frozen=True)
class Limits:
    """One limit per class of request, in `limits`' notation ("600/second"); "" = none."""

    dryruns: str = "600/second"
    writes: str = "600/second"
    reads: str = "6000/second"


def parse_limit(text: str, *, name: str) -> RateLimitItem | None:
    """`limits`' notation, or ValueError naming the setting."""
    if not text.strip() or text.strip().lower() in ("off", "none"):
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {text!r} is not a rate like 600/second ({exc})") from None


def request_class(method: str, path: str) -> str | None:
    if path in UNLIMITED_PATHS:
        return None
    if method == "POST" and path.endswith("/placements:dryRun"):
        return "dryruns"
    if method in ("POST", "PUT", "PATCH", "DELETE"):
        return "writes"
    return "reads"


class RateLimits:
    """Answer 429 `TooManyRequests` with Retry-After past a client's limit for its class."""

    def __init__(self, app: ASGIApp, *, limits: Limits) -> None:
        self.app = app
        self.items = {name: parse_limit(getattr(limits, name), name=f"rate limit of {name}")
                      for name in ("dryruns", "writes", "reads")}
        self.limiter = FixedWindowRateLimiter(MemoryStorage())

    def client_of(self, scope: Scope) -> str:
        for key, value in scope.get("headers", ()):
            if key == b"authorization" and value[:7].lower() == b"bearer ":
                token = value[7:].strip()
                app = scope.get("app")
                guard = getattr(getattr(app, "state", None), "guard", None)
                for static in getattr(guard, "tokens", ()):
                    if hmac.compare_digest(token, static.token.encode()):
                        return f"token:{static.name}"
        client = scope.get("client")
        return f"address:{client[0]}" if client else "address:unknown"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = request_class(scope["method"], scope["path"])
        item = self.items.get(kind) if kind else None
        if item is not None:
            client = self.client_of(scope)
            if not self.limiter.hit(item, kind or "", client):
                reset = self.limiter.get_window_stats(item, kind or "", client).reset_time
                wait = max(1, math.ceil(reset - time.time()))
                response = error_response(
                    429, "TooManyRequests", None,
                    f"{client.split(':', 1)[1]} sent more than {item.amount} "
                    f"{WORDS.get(kind or '', kind)} in {item.get_expiry()} s; "
                    f"retry after {wait} s")
                response.headers["Retry-After"] = str(wait)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
