"""Event rates: how many informative writes (Events) the operator may post per second.

Why a rate limit: every admission already costs the API server two writes (the user's create and
our status write). An Event per admission would add a third, and on a small control plane the
API server's intake, not the scheduler, bounds admissions per second. Kubernetes treats Events
as best effort for the same reason (the kubelet's `--event-qps`/`--event-burst`): status is the
record, an Event is a notice. So Events are posted from a token bucket: a burst goes out at
once; past it, a flood is summarised (`EventDigests`): one Event per namespace, kind and reason
every few seconds names how many jobs it stands for, so a burst of 5,000 admissions costs a few
dozen Events, not one per job and not one per token the bucket refills.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("ultraplane.operator")


@dataclass
class TokenBucket:
    """`burst` tokens, refilled at `qps` per second of `clock` (monotonic seconds).

    `qps <= 0` means no limit.
    """

    qps: float
    burst: int
    clock: Callable[[], float]
    dropped: int = 0
    _tokens: float = field(init=False)
    _last: float = field(init=False)
    _reported: float = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = float(max(self.burst, 1))
        self._last = self._reported = self.clock()

    def take(self, *, quiet: bool = False) -> bool:
        """Spend one token if there is one; count a drop otherwise (`quiet`: the caller keeps
        what it could not post, so nothing is dropped or logged)."""
        if self.qps <= 0:
            return True
        now = self.clock()
        self._tokens = min(float(max(self.burst, 1)), self._tokens + (now - self._last) * self.qps)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        if quiet:
            return False
        self.dropped += 1
        if now - self._reported >= 60.0:
            log.info("%d Events dropped by the Event rate limit (%.1f/s, burst %d) in the last "
                     "minute; job status holds every transition", self.dropped, self.qps,
                     self.burst)
            self.dropped, self._reported = 0, now
        return False


Notice = tuple[Mapping[str, Any], str, str, str]  # (body the Event regards, type, reason, message)
SHOWN = 10  # job names a digest's message lists


@dataclass
class _Digest:
    since: float
    body: Mapping[str, Any] | None = None
    message: str = ""
    names: list[str] = field(default_factory=list)
    count: int = 0


@dataclass
class EventDigests:
    """Events one by one while the `bucket` has tokens; one Event per `seconds` for each
    namespace, kind, type and reason once it runs dry (Kubernetes aggregates repeated Events
    the same way, as a series: a flood of Admitted is one notice, not thousands).

    A transition the bucket cannot pay for opens a digest for its key; every later transition
    of that key joins it, with no token spent, until it is `seconds` old: then `due` gives one
    Event that regards the digest's first job and names the others (a digest of one is that
    job's own Event, late). The key stays summarised while transitions keep coming; a window
    that ends empty closes it, and Events go one by one again. So a flood costs `burst` Events
    and one per key every `seconds`, and no transition goes unmentioned."""

    bucket: TokenBucket
    seconds: float = 10.0
    open: dict[tuple[str, str, str, str], _Digest] = field(default_factory=dict)

    def add(self, body: Mapping[str, Any], type_: str, reason: str,
            message: str) -> Notice | None:
        """What to post now: the Event itself, or None when a digest took it."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(body.get("kind") or ""), type_, reason)
        digest = self.open.get(key)
        if digest is None:
            if self.bucket.qps <= 0 or self.bucket.take(quiet=True):
                return (body, type_, reason, message)
            digest = self.open[key] = _Digest(since=self.bucket.clock())
        if digest.body is None:
            digest.body, digest.message = dict(body), message
        if len(digest.names) < SHOWN:
            digest.names.append(str(meta.get("name") or ""))
        digest.count += 1
        return None

    def next_due(self) -> float | None:
        """Seconds until the oldest digest is due (None when none is open)."""
        if not self.open:
            return None
        now = self.bucket.clock()
        return max(0.0, min(d.since for d in self.open.values()) + self.seconds - now)

    def due(self) -> list[Notice]:
        """The digests `seconds` old, as Events; their keys stay summarised for another window
        (closed instead when nothing joined them)."""
        now = self.bucket.clock()
        out: list[Notice] = []
        for key, digest in list(self.open.items()):
            if now - digest.since < self.seconds:
                continue
            if digest.body is None:  # a window with nothing in it: the flood has passed
                del self.open[key]
                continue
            out.append(summary(digest, key[1], key[2], key[3], now - digest.since))
            self.open[key] = _Digest(since=now)
        return out


def summary(digest: _Digest, kind: str, type_: str, reason: str, seconds: float) -> Notice:
    assert digest.body is not None
    if digest.count == 1:
        return (digest.body, type_, reason, digest.message)
    more = digest.count - len(digest.names)
    names = ", ".join(digest.names) + (f" and {more} more" if more > 0 else "")
    return (digest.body, type_, reason,
            f"{digest.count} {kind or 'object'}s {reason} in {seconds:.0f}s, posted as one Event "
            f"(the Event rate limit): {names}. Each job's status holds its own transition; this "
            f"one's: {digest.message}")
