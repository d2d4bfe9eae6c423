"""The pod data plane's own watch of the pods it created: list, then watch, as raw JSON.

Why not a kopf handler like the other kinds: every pod changes four or five times in its life
(created, Running, Succeeded or deleted gracefully, gone), so at a launch rate of a hundred
pods a second the pod watch carries most of the operator's events, and kopf's per-event work
(a worker task per object, a batch window, a cause, a logger, handler bookkeeping) cost more
than the pod plane's own reaction. The pod plane needs none of it: it only records what a pod
says (`PodPlane.observe_pods`) and compares level-triggered, so this module decodes each event
line and hands the events over in batches, one loop wake-up per chunk read.

A watch that ends (server timeout, a dropped connection) resumes from its last
resourceVersion; one that is too old (410 Gone) lists again, and the list is a full picture:
pods known before and absent from it were deleted during the gap (`PodPlane.relisted`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

log = logging.getLogger("ultraplane.operator.pods")
Event = tuple[str, dict[str, Any]]  # (ADDED | MODIFIED | DELETED, pod body)


class Expired(Exception):
    """The resourceVersion a watch resumes from is too old (410): list again."""


class PodWatchKube(Protocol):
    def list_pods(self, namespace: str | None, label: str) -> tuple[list[dict[str, Any]], str]: ...
    def watch_pods(self, namespace: str | None, label: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[list[bytes]]: ...


class PodWatch:
    """One list+watch per namespace (None: the whole cluster), each in its own thread.

    `on_list(namespace, bodies)` receives a complete listing; `on_events(events)` a batch of
    watch events; both are called on the event loop."""

    def __init__(self, kube: PodWatchKube, label: str, namespaces: list[str] | None, *,
                 on_list: Callable[[str | None, list[dict[str, Any]]], None],
                 on_events: Callable[[list[Event]], None],
                 server_timeout: int = 300, pause: float = 1.0) -> None:
        self.kube = kube
        self.label = label
        self.scopes: list[str | None] = list(namespaces) if namespaces else [None]
        self.on_list = on_list
        self.on_events = on_events
        self.server_timeout = server_timeout
        self.pause = pause
        self.stop = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.versions: dict[str | None, str] = {}

    async def sync(self) -> None:
        """The first listing of every scope, delivered before this returns (so the first
        admission already knows every pod of an earlier run)."""
        self.loop = asyncio.get_running_loop()
        for scope in self.scopes:
            items, version = await self.loop.run_in_executor(
                None, self.kube.list_pods, scope, self.label)
            self.versions[scope] = version
            self.on_list(scope, items)

    def start(self) -> None:
        assert self.loop is not None, "sync() first"
        for scope in self.scopes:
            threading.Thread(target=self._run, args=(scope,), daemon=True,
                             name=f"pod-watch-{scope or 'all'}").start()

    def close(self) -> None:
        self.stop.set()

    def _deliver(self, fn: Callable[..., None], *args: Any) -> None:
        assert self.loop is not None
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the operator is shutting down
            self.stop.set()

    def _run(self, scope: str | None) -> None:
        while not self.stop.is_set():
            try:
                version = self.versions.get(scope)
                if not version:
                    items, version = self.kube.list_pods(scope, self.label)
                    self.versions[scope] = version
                    self._deliver(self.on_list, scope, items)
                self._watch(scope, version)
            except Expired:
                log.info("pod watch of %s expired; listing again", scope or "all namespaces")
                self.versions[scope] = ""
            except Exception as exc:
                if self.stop.is_set():
                    return
                log.warning("pod watch of %s: %s; resuming", scope or "all namespaces", exc)
                self.stop.wait(self.pause)

    def _watch(self, scope: str | None, version: str) -> None:
        for lines in self.kube.watch_pods(scope, self.label, version, self.server_timeout):
            if self.stop.is_set():
                return
            events: list[Event] = []
            for line in lines:
                event = json.loads(line)
                kind, body = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if body.get("code") == 410:
                        raise Expired(str(body.get("message") or "too old"))
                    raise RuntimeError(str(body.get("message") or body))
                version = str((body.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    events.append((kind, body))
            self.versions[scope] = version
            if events:
                self._deliver(self.on_events, events)
