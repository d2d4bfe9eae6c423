"""Posting Kubernetes Events through kopf, within the Event rate limit (`eventrates`).

Why an object: kopf's Event poster lives in context variables that are set for handlers only,
so the first handler call captures that context and everything else (the admission loop, the
pod data plane, Node discovery) posts through it. Events asked for before that are kept (they
are already paid for by the rate limit) and posted once it is captured; past it they are
summarised into digests, posted by one timer when due. This state was module globals of the
handlers; here it is one object the handlers build and pass as `emit`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from ultraplane.operator.eventrates import EventDigests, Notice, TokenBucket

log = logging.getLogger("ultraplane.operator")
EARLY_LIMIT = 10_000  # Events kept before the first handler call; more are dropped
MESSAGE_LIMIT = 1000  # characters of an Event's message


class EventPoster:
    """`post(body, type, reason, message)`: an Event on the object, or its share of a digest."""

    def __init__(self, *, enabled: bool = True, qps: float = 5.0, burst: int = 50,
                 digest_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.digests = EventDigests(TokenBucket(qps, burst, clock), seconds=digest_seconds)
        self._context: contextvars.Context | None = None
        self._early: list[tuple[dict[str, Any], str, str, str]] = []
        self._timer: asyncio.TimerHandle | None = None  # posts the next digest due

    def post(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post now (kopf batches and posts in the background), or count it in a digest once
        the rate limit's bucket runs dry (`EventDigests`)."""
        if not self.enabled:
            return
        now = self.digests.add(body, type_, reason, message)
        if now is not None:
            self._send(now)
        self._arm()

    def capture(self) -> None:
        """Called by every handler: the first call keeps kopf's posting context and posts
        what waited for it."""
        if self._context is not None:
            return
        self._context = contextvars.copy_context()
        early, self._early = self._early, []
        for body, type_, reason, message in early:  # already paid for by the rate limit
            self._context.run(kopf.event, body, type=type_, reason=reason,  # type: ignore[arg-type]
                              message=message[:MESSAGE_LIMIT])

    def _arm(self) -> None:
        """Post the digests when they are due (one timer, for the oldest)."""
        wait = self.digests.next_due()
        if wait is None or (self._timer is not None and not self._timer.cancelled()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a unit test calling directly): the next call arms it
            return
        self._timer = loop.call_later(wait + 0.01, self._flush)

    def _flush(self) -> None:
        self._timer = None
        for notice in self.digests.due():
            self._send(notice)
        self._arm()

    def _send(self, notice: Notice) -> None:
        body, type_, reason, message = notice
        if self._context is None:  # before the first watch event: keep it until reachable
            if len(self._early) < EARLY_LIMIT:
                self._early.append((dict(body), type_, reason, message))
            return
        try:
            self._context.run(kopf.event, dict(body), type=type_,  # type: ignore[arg-type]
                              reason=reason, message=message[:MESSAGE_LIMIT])
        except Exception as exc:  # events are best effort; never block an admission on them
            log.debug("event not posted: %s", exc)
