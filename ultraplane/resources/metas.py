"""The part of Kubernetes' ObjectMeta that manifests carry.

Only what a user writes in a manifest is modelled; the API server owns the rest
(uid, resourceVersion, managedFields), so those are accepted and ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ultraplane.resources.commons import NAME_MAX


class ObjectMeta(BaseModel):
    """Name, namespace, labels and annotations of an object."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    name: str = Field(
        min_length=1,
        max_length=NAME_MAX,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Object name (a DNS subdomain).",
    )
    namespace: str | None = Field(default=None, max_length=63, description="Namespace.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")
    generation: int | None = Field(default=None, description="Spec generation (server-set).")
