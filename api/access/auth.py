"""Who is calling (authentication) and whether they may do this (authorization).

Authentication: a bearer token is a static token (`ULTRAPLANE_API_TOKENS`,
`--token-file`, see `ultraplane.api.access.tokens`) or, in Kubernetes mode with
`ULTRAPLANE_TOKEN_REVIEW=1`, any token the cluster's TokenReview accepts. With
no token configured and no TokenReview the API is open, which is what a
newcomer's `ultraplane serve` on loopback wants.

Authorization, once authentication is on: every request on jobs (create,
delete, get, list) and on accounting is checked for the caller, by verb,
resource and namespace. A static token is checked against its own grant
(namespaces and verbs). A TokenReview user is checked by a SubjectAccessReview,
so the API never does what the caller could not do with kubectl. Fleet-wide
reads (UltraServers, capacity) stay open unless `ULTRAPLANE_API_PROTECT_READS=1`, which
makes them need any valid token; either way they name a job (namespace/name) only to a
caller who may read its namespace, and show everyone else's as "another tenant" (`Reader`).
Dry runs cost CPU, so once authentication is on they need a valid token.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.kubereviews import KubeReviews, UserInfo
from ultraplane.api.access.tokens import Grant, StaticToken, load_tokens
from ultraplane.api.errors import ApiError

__all__ = ["Access", "Caller", "FleetReader", "Guard", "Reader", "load_tokens", "require_access",
           "require_dry_run", "require_fleet_read"]
READ_VERBS = ("list", "get")
JOB_RESOURCES = ("trainingjobs", "inferencejobs")

bearer = HTTPBearer(auto_error=False, description="Bearer token (see docs/api.md, Auth).")


@dataclass(frozen=True)
class Access:
    """One request's verb on resources; `namespace` None means across all namespaces."""

    verb: str
    resources: tuple[str, ...]
    namespace: str | None
    name: str | None = None

    def where(self) -> str:
        return f"in namespace {self.namespace}" if self.namespace else "in all namespaces"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: a static token's grant, or a cluster user to ask about."""

    name: str
    grant: Grant | None = None
    user: UserInfo | None = None


@dataclass(frozen=True)
class Reader:
    """Whose job names a fleet-wide read may show: every namespace (`everything`), or those
    `may_read` allows (a static grant's namespaces; a SubjectAccessReview per namespace)."""

    everything: bool = False
    namespaces: frozenset[str] = frozenset()
    ask: Callable[[str], bool] | None = None  # a cluster user: may they list jobs there?

    def may_read(self, namespace: str | None) -> bool:
        if self.everything:
            return True
        if namespace is None:
            return False
        if namespace in self.namespaces:
            return True
        return self.ask is not None and self.ask(namespace)


EVERYONE = Reader(everything=True)
NOBODY = Reader()


class Guard:
    """Authenticates and authorizes requests; built once per app."""

    def __init__(
        self,
        tokens: tuple[StaticToken, ...] = (),
        *,
        protect_reads: bool = False,
        reviews: KubeReviews | None = None,
    ) -> None:
        self.tokens = tokens
        self.protect_reads = protect_reads
        self.reviews = reviews

    @property
    def enabled(self) -> bool:
        return bool(self.tokens) or self.reviews is not None

    def authenticate(self, credentials: HTTPAuthorizationCredentials | None) -> Caller:
        if credentials is None or not credentials.credentials:
            raise ApiError(401, "Unauthorized", "Authorization", "a bearer token is required")
        token = credentials.credentials.encode()
        found: StaticToken | None = None
        # Compare with every token in constant time so timing does not reveal a prefix.
        for static in self.tokens:
            if hmac.compare_digest(token, static.token.encode()):
                found = static
        if found is not None:
            return Caller(name=found.name, grant=found.grant)
        if self.reviews is not None:
            user = self.reviews.authenticate(credentials.credentials)
            if user is not None:
                return Caller(name=user.username, user=user)
        raise ApiError(401, "Unauthorized", "Authorization", "the bearer token is not accepted")

    def authorize(self, caller: Caller, access: Access) -> None:
        for resource in access.resources:
            if caller.grant is not None:
                allowed, reason = caller.grant.allows(access.verb, access.namespace), ""
            elif caller.user is not None and self.reviews is not None:
                allowed, reason = self.reviews.authorize(
                    caller.user, verb=access.verb, resource=resource,
                    namespace=access.namespace, name=access.name)
            else:
                allowed, reason = False, ""
            if not allowed:
                because = f" ({reason})" if reason else ""
                raise ApiError(403, "Forbidden", "Authorization",
                               f"{caller.name} may not {access.verb} {resource} "
                               f"{access.where()}{because}")

    def reader(self, credentials: HTTPAuthorizationCredentials | None, *,
               need_token: bool = False) -> Reader:
        """Who may see which job names in a fleet-wide read (401 where a token is needed)."""
        if not self.enabled:
            return EVERYONE
        if (credentials is None or not credentials.credentials) and not (
                self.protect_reads or need_token):
            return NOBODY
        if self.protect_reads or need_token:
            caller = self.authenticate(credentials)
        else:
            try:  # open reads: a token not accepted is no one's, as no token is
                caller = self.authenticate(credentials)
            except ApiError:
                return NOBODY
        if caller.grant is not None:
            grant = caller.grant
            if not any(v in grant.verbs for v in READ_VERBS):
                return NOBODY
            if grant.namespaces is None:
                return EVERYONE
            return Reader(namespaces=grant.namespaces)
        reviews, user = self.reviews, caller.user
        if reviews is None or user is None:
            return NOBODY

        def ask(namespace: str | None) -> bool:
            return any(reviews.authorize(user, verb="list", resource=r, namespace=namespace,
                                         name=None)[0] for r in JOB_RESOURCES)

        if ask(None):
            return EVERYONE
        return Reader(ask=ask)

    def check(self, credentials: HTTPAuthorizationCredentials | None,
              access: Access | None) -> None:
        """Raise 401/403 unless the request may go on; `access` None is a fleet-wide read."""
        if not self.enabled or (access is None and not self.protect_reads):
            return
        caller = self.authenticate(credentials)
        if access is not None:
            self.authorize(caller, access)


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def _check(request: Request, credentials: Credentials, access: Access | None) -> None:
    # async on purpose: a sync dependency costs a thread hop per request. Only the
    # cluster's reviews (network calls) go to a worker thread.
    guard: Guard = request.app.state.guard
    if guard.reviews is None:
        guard.check(credentials, access)
    else:
        await run_in_threadpool(guard.check, credentials, access)


async def require_fleet_read(request: Request, credentials: Credentials) -> Reader:
    """UltraServers and capacity: a token only with ULTRAPLANE_API_PROTECT_READS; the
    caller's `Reader` says whose job names the answer may show."""
    guard: Guard = request.app.state.guard
    if guard.reviews is None:
        return guard.reader(credentials)
    return await run_in_threadpool(guard.reader, credentials)


async def require_dry_run(request: Request, credentials: Credentials) -> Reader:
    """Dry runs: a valid token whenever authentication is on (they cost CPU), and the
    victims of a preemption plan are named as `require_fleet_read` names jobs."""
    guard: Guard = request.app.state.guard
    if guard.reviews is None:
        return guard.reader(credentials, need_token=True)
    return await run_in_threadpool(guard.reader, credentials, need_token=True)


FleetReader = Annotated[Reader, Depends(require_fleet_read)]
DryRunReader = Annotated[Reader, Depends(require_dry_run)]


def require_access(
    verb: str, *resources: str
) -> Callable[[Request, HTTPAuthorizationCredentials | None], Awaitable[None]]:
    """A dependency authorizing `verb` on `resources` in the request's namespace.

    The namespace is the `{namespace}` path parameter, else the `namespace` query
    parameter, else none (a request across all namespaces).
    """

    async def dependency(request: Request, credentials: Credentials) -> None:
        params = request.path_params
        namespace = params.get("namespace") or request.query_params.get("namespace") or None
        name = params.get("name") if verb in ("get", "delete") else None
        await _check(request, credentials, Access(verb, resources, namespace, name))

    return dependency
