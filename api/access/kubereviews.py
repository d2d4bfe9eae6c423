"""Kubernetes mode: who a bearer token is (TokenReview) and what they may do (SubjectAccessReview).

The API writes the custom resources with its own ServiceAccount, so without this
check any authenticated caller could do whatever that ServiceAccount may. Each
request is therefore asked of the cluster's own authorizer for the caller's
user, groups and extra: the same answer `kubectl auth can-i` gives them. Answers
are cached for a few seconds (as kube-apiserver's webhook authorizer does) so
a busy client costs one review per window, not one per request; a revoked
RoleBinding takes effect within `TTL_S`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ultraplane.api.errors import ApiError

GROUP = "ultraplane.dev"
TTL_S = 10.0
MAX_ENTRIES = 4096

V = TypeVar("V")


@dataclass(frozen=True)
class UserInfo:
    """The authenticated user as TokenReview reports it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())


class TtlCache(Generic[V]):
    """A small thread-safe map whose entries expire after `ttl_s` (oldest evicted when full)."""

    def __init__(self, ttl_s: float = TTL_S, size: int = MAX_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.size, self.clock = ttl_s, size, clock
        self._items: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[0] < self.clock():
                return None
            return hit[1]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = (self.clock() + self.ttl_s, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def _unavailable(what: str, exc: Exception) -> ApiError:
    return ApiError(503, "ClusterUnavailable", None,
                    f"cannot ask the API server for a {what}: {exc.__class__.__name__}")


class KubeReviews:
    """TokenReview and SubjectAccessReview against the cluster, both cached."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._client = client
        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._users: TtlCache[UserInfo | bool] = TtlCache()
        self._decisions: TtlCache[tuple[bool, str]] = TtlCache()

    def authenticate(self, token: str) -> UserInfo | None:
        """The token's user, or None when the cluster does not authenticate it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        if cached is not None:
            return cached if isinstance(cached, UserInfo) else None
        c = self._client
        try:
            review = self._authn.create_token_review(
                c.V1TokenReview(spec=c.V1TokenReviewSpec(token=token)))
        except Exception as exc:
            raise _unavailable("TokenReview", exc) from exc
        status = review.status
        if not (status and status.authenticated and status.user and status.user.username):
            self._users.put(key, False)
            return None
        user = status.user
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.extra or {}).items()))
        info = UserInfo(username=str(user.username), uid=user.uid or "",
                        groups=tuple(user.groups or ()), extra=extra)
        self._users.put(key, info)
        return info

    def authorize(self, user: UserInfo, *, verb: str, resource: str, namespace: str | None,
                  name: str | None) -> tuple[bool, str]:
        """(allowed, reason) of `verb` on `resource` in `namespace` (None: all namespaces)."""
        key = (user, verb, resource, namespace, name)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        c = self._client
        spec = c.V1SubjectAccessReviewSpec(
            user=user.username, uid=user.uid or None, groups=list(user.groups) or None,
            extra={k: list(v) for k, v in user.extra} or None,
            resource_attributes=c.V1ResourceAttributes(
                group=GROUP, resource=resource, verb=verb, namespace=namespace or "",
                name=name or None),
        )
        try:
            review = self._authz.create_subject_access_review(c.V1SubjectAccessReview(spec=spec))
        except Exception as exc:
            raise _unavailable("SubjectAccessReview", exc) from exc
        status = review.status
        decision = (bool(status and status.allowed and not status.denied),
                    str((status and status.reason) or ""))
        self._decisions.put(key, decision)
        return decision
