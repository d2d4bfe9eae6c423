"""Bearer tokens: required on mutating endpoints once any token is configured.

Tokens come from `ULTRAPLANE_API_TOKENS` (comma-separated) and/or a token file
(one per line, `#` comments). With no token configured the API is open, which
is what a newcomer's `ultraplane serve` on loopback wants. Reads stay open
unless `ULTRAPLANE_API_PROTECT_READS=1`. In Kubernetes mode a token that is
not in the static list can be checked with a TokenReview against the cluster.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from ultraplane.api.errors import ApiError
from ultraplane.api.settings import Settings

TokenReviewer = Callable[[str], bool]

bearer = HTTPBearer(auto_error=False, description="Bearer token (see docs/api.md).")


def load_tokens(settings: Settings) -> frozenset[str]:
    """All static tokens; a missing or unreadable token file is a startup error, not open access."""
    tokens = {t.strip() for t in settings.api_tokens.split(",") if t.strip()}
    if settings.token_file:
        path = Path(settings.token_file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"token file {path} cannot be read: {exc.strerror}") from exc
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                tokens.add(line)
    return frozenset(tokens)


class Guard:
    """Decides whether a request may read or write; built once per app."""

    def __init__(
        self,
        tokens: frozenset[str],
        *,
        protect_reads: bool = False,
        reviewer: TokenReviewer | None = None,
    ) -> None:
        self.tokens = tokens
        self.protect_reads = protect_reads
        self.reviewer = reviewer

    @property
    def enabled(self) -> bool:
        return bool(self.tokens) or self.reviewer is not None

    def accepts(self, token: str) -> bool:
        # Compare every token in constant time so timing does not reveal a prefix.
        if any(hmac.compare_digest(token.encode(), t.encode()) for t in self.tokens):
            return True
        return self.reviewer is not None and self.reviewer(token)

    def check(self, credentials: HTTPAuthorizationCredentials | None, *, write: bool) -> None:
        if not self.enabled or (not write and not self.protect_reads):
            return
        if credentials is None or not credentials.credentials:
            raise ApiError(401, "Unauthorized", "Authorization", "a bearer token is required")
        if not self.accepts(credentials.credentials):
            raise ApiError(403, "Forbidden", "Authorization", "the bearer token is not accepted")


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def _check(request: Request, credentials: Credentials, *, write: bool) -> None:
    # async on purpose: a sync dependency costs a thread hop per request. Only a
    # TokenReview (a network call) goes to a worker thread.
    guard: Guard = request.app.state.guard
    if guard.reviewer is None:
        guard.check(credentials, write=write)
    else:
        await run_in_threadpool(guard.check, credentials, write=write)


async def require_read(request: Request, credentials: Credentials) -> None:
    await _check(request, credentials, write=False)


async def require_write(request: Request, credentials: Credentials) -> None:
    await _check(request, credentials, write=True)


def token_reviewer(api_client: object) -> TokenReviewer:
    """A reviewer that asks the cluster's TokenReview API (Kubernetes mode only)."""
    from kubernetes import client

    auth = client.AuthenticationV1Api(api_client)

    def review(token: str) -> bool:
        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        try:
            result = auth.create_token_review(body)
        except Exception:
            return False
        return bool(result.status and result.status.authenticated)

    return review
