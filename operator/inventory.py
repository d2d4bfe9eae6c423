"""The operator's cache of UltraServers, fed by watch events, and what changed between versions.

Why a cache and not a read per cycle: a cycle must not list 256+ objects from the API server;
watch events keep this map current and the admission loop works on the allocator it updates.
The diff (`InventoryChange`) is what turns a spec edit into immediate effects: new failed chips
hit the jobs on them, cordons stop new placements at once, and the drain policy says whether
running jobs stay or are requeued.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ultraplane.documents import conversions
from ultraplane.hardware.topology import UltraServer
from ultraplane.ids import ChipId

DRAIN_POLICIES = ("Wait", "Requeue")


@dataclass(frozen=True)
class ServerEntry:
    """One UltraServer as the operator sees it: the core object plus operator-only fields."""

    ultraserver: UltraServer
    drain_policy: str = "Wait"
    resource_version: str = ""


@dataclass(frozen=True)
class InventoryChange:
    """What a new version of an UltraServer means for placements and running jobs."""

    name: str
    newly_failed: frozenset[ChipId] = field(default_factory=frozenset)
    newly_cordoned: frozenset[int] = field(default_factory=frozenset)
    became_unschedulable: bool = False


def ultraserver_from_body(body: Mapping[str, Any]) -> ServerEntry:
    """The core's frozen `UltraServer` of an object body (`ultraplane.documents.conversions`), plus the
    operator's fields; raises ValueError naming the field of a bad spec."""
    us, spec = conversions.ultraserver_from_body(body)
    return ServerEntry(
        ultraserver=us,
        drain_policy=str(spec.drain_policy.value),
        resource_version=str((body.get("metadata") or {}).get("resourceVersion", "")),
    )


def diff(old: ServerEntry | None, new: ServerEntry) -> InventoryChange:
    """Chips that failed, servers cordoned and schedulability lost since `old`."""
    name = new.ultraserver.name
    before_failed = old.ultraserver.failed_chips if old else frozenset()
    before_cordoned = old.ultraserver.cordoned_servers if old else frozenset()
    was_schedulable = old.ultraserver.schedulable if old else True
    return InventoryChange(
        name=name,
        newly_failed=frozenset(
            ChipId(f"{name}/{ref}") for ref in new.ultraserver.failed_chips - before_failed
        ),
        newly_cordoned=new.ultraserver.cordoned_servers - before_cordoned,
        became_unschedulable=was_schedulable and not new.ultraserver.schedulable,
    )


class Inventory:
    """Latest known UltraServers by name."""

    def __init__(self) -> None:
        self._entries: dict[str, ServerEntry] = {}

    def upsert(self, entry: ServerEntry) -> InventoryChange:
        change = diff(self._entries.get(entry.ultraserver.name), entry)
        self._entries[entry.ultraserver.name] = entry
        return change

    def remove(self, name: str) -> ServerEntry | None:
        return self._entries.pop(name, None)

    def get(self, name: str) -> ServerEntry | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
