"""Leader election with a coordination.k8s.io Lease: only one replica allocates.

Why a Lease and not kopf peering: peering pauses kopf's watchers but not our admission loop,
and it needs its own CRD; a Lease is built into Kubernetes. A replica that loses the lease stops
writing at once; one that gains it rebuilds its state from the API server before admitting, so a
takeover never trusts memory (allocations live in job status).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

log = logging.getLogger("ultraplane.operator")


class LeaseElector:
    """Acquire and renew one Lease; call `on_gain` / `on_loss` on transitions."""

    def __init__(self, api: Any, *, name: str, namespace: str, identity: str,
                 on_gain: Callable[[], Awaitable[None]], on_loss: Callable[[], None],
                 duration_s: int = 15, renew_s: float = 5.0) -> None:
        self.api, self.name, self.namespace, self.identity = api, name, namespace, identity
        self.on_gain, self.on_loss = on_gain, on_loss
        self.duration_s, self.renew_s = duration_s, renew_s
        self.leading = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                held = await loop.run_in_executor(None, self._try_acquire)
            except Exception as exc:  # API unreachable: assume we lost it
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                held = False
            if held and not self.leading:
                self.leading = True
                log.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
                await self.on_gain()
            elif not held and self.leading:
                self.leading = False
                log.warning("lost lease %s/%s; stopping admission", self.namespace, self.name)
                self.on_loss()
            await asyncio.sleep(self.renew_s)

    def _try_acquire(self) -> bool:
        import kubernetes

        now = datetime.now(UTC)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s,
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": self.name}, "spec": {**spec, "acquireTime": spec["renewTime"]}}
            try:
                self.api.create_namespaced_lease(self.namespace, body)
                return True
            except kubernetes.client.ApiException as exc2:
                if exc2.status == 409:
                    return False
                raise
        holder = lease.spec.holder_identity
        renewed = lease.spec.renew_time
        expired = renewed is None or renewed + timedelta(
            seconds=lease.spec.lease_duration_seconds or self.duration_s) < now
        if holder != self.identity and not expired:
            return False
        body = {"metadata": {"resourceVersion": lease.metadata.resource_version}, "spec": spec}
        try:
            self.api.patch_namespaced_lease(self.name, self.namespace, body)
        except kubernetes.client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True
