"""`PATCH /v1/ultraservers/{name}`: mark chips failed or servers cordoned, over HTTP.

Why: without it an embedded fleet (`ultraplane serve`) had no way to break a chip, so the
failure policies could not be exercised through the API at all. The body is a JSON merge patch
(RFC 7386) of the UltraServer spec's own fields, `spec.failedChips` and `spec.cordonedServers`:
a list replaces the list, null empties it, a field left out stays. The merged spec is checked
by the resources' own `UltraServerSpec` (a chip outside the UltraServer is a 422 naming it).

The embedded backend applies it as the operator applies an UltraServer watch event: the
allocator adopts the new health, and every job holding a newly failed chip gets the core's
decision for its failure policy (`Admissions.chip_failed`); cordons stop new placements. In
Kubernetes mode the object is patched and the operator does the rest.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ultraplane.api.errors import ApiError

from ultraplane.documents.conversions import ultraserver_from_spec
from ultraplane.hardware.topology import UltraServer
from ultraplane.resources.ultraservers import UltraServerSpec

__all__ = ["UltraServerPatch", "UltraServerSpecPatch", "patched"]


class UltraServerSpecPatch(BaseModel):
    """The spec fields an UltraServer patch may change (a merge patch: null empties a list)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    failed_chips: list[Annotated[str, Field(max_length=16)]] | None = Field(
        default=None, alias="failedChips", max_length=4096,
        description="Broken chips as local refs `sNN/cNN` (zero-based); replaces the list.")
    cordoned_servers: list[Annotated[int, Field(ge=0, strict=True)]] | None = Field(
        default=None, alias="cordonedServers", max_length=4096,
        description="Zero-based indexes of servers out of service; replaces the list.")


class UltraServerPatch(BaseModel):
    """A JSON merge patch of an UltraServer: only `spec.failedChips` and
    `spec.cordonedServers`."""

    model_config = ConfigDict(extra="forbid")

    spec: UltraServerSpecPatch

    def spec_fields(self) -> dict[str, Any]:
        """The merge patch of the spec as given (a null stays a null: it empties the list)."""
        return self.spec.model_dump(by_alias=True, exclude_unset=True)


def patched(us: UltraServer, patch: UltraServerPatch) -> UltraServer:
    """`us` with the patch merged into its spec, checked by `UltraServerSpec` (422 naming the
    field when the result is not a valid spec)."""
    fields = patch.spec_fields()
    spec: dict[str, Any] = {
        "profile": us.profile,
        "network": list(us.network),
        "schedulable": us.schedulable,
        "failedChips": sorted(us.failed_chips),
        "cordonedServers": sorted(us.cordoned_servers),
    }
    if us.servers is not None:
        spec["servers"] = us.servers
    for name, value in fields.items():
        spec[name] = value if value is not None else []
    try:
        checked = UltraServerSpec.model_validate(spec)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "__root__")
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        raise ApiError(422, "ValidationError", f"body.spec.{where}" if where else "body.spec",
                       message) from exc
    return ultraserver_from_spec(us.name, checked)
