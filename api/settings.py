"""Settings of the REST API, read from `ULTRAPLANE_*` environment variables.

One `Settings` object is built per app (the CLI builds it from its flags), so
tests can run several apps side by side without touching the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from ultraplane.api.guards.ratelimits import Limits


def default_db_url() -> str:
    """SQLite next to the user's data, or `./ultraplane.db` when that is not writable.

    A newcomer's `ultraplane serve` must keep its state across restarts without
    any flag, wherever it is started from.
    """
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    folder = data_home / "ultraplane"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return "sqlite:///./ultraplane.db"
    if not os.access(folder, os.W_OK):
        return "sqlite:///./ultraplane.db"
    return f"sqlite:///{folder / 'ultraplane.db'}"


class Settings(BaseSettings):
    """Everything `create_app` needs; every field is `ULTRAPLANE_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="ULTRAPLANE_", extra="ignore")

    backend: Literal["embedded", "kubernetes"] = "embedded"
    db: str = Field(default_factory=default_db_url, description="SQLAlchemy URL of the store.")
    fleet: str = Field(default="trn3-gen2:8", description="PROFILE:COUNT of the demo fleet.")
    cluster: str | None = Field(default=None, description="Cluster YAML instead of --fleet.")
    demo: bool = Field(default=False, description="Submit a stream of demo jobs.")
    demo_seed: int = 7
    time_scale: float = Field(default=60.0, gt=0, le=1e7,
                              description="Simulated seconds per wall second.")
    tick_seconds: float = Field(default=1.0, ge=0.01, le=3600,
                                description="Wall seconds between ticks.")
    api_tokens: str = Field(default="", description="Comma-separated bearer tokens.")
    token_file: str | None = Field(default=None, description="File with one token per line.")
    api_protect_reads: bool = False
    token_review: bool = Field(default=False, description="Kubernetes mode: ask TokenReview.")
    kubeconfig: str | None = None
    kube_context: str | None = None
    accounting_interval_seconds: float = Field(default=5.0, ge=0.01, le=86400)
    dry_run_plan_seconds: float = Field(
        default=2.0, ge=0.01, le=600,
        description="Wall seconds a dry run's preemption plan may take before a 503.")
    rate_limit_dryruns: str = Field(default="600/second", description=(
        "Dry runs per client (bearer token, else address), as `limits` writes a rate; off: none."))
    rate_limit_writes: str = Field(default="600/second", description="Creates and deletes per client.")
    rate_limit_reads: str = Field(default="6000/second", description="Other requests per client.")
    max_connections: int = Field(default=512, ge=1, le=100_000, description=(
        "Open connections served at once; past it, new requests get 503."))
    request_read_seconds: float = Field(default=10.0, gt=0, le=3600, description=(
        "Wall seconds a client may take to send a request's headers and body."))
    max_body_bytes: int = Field(default=1 << 20, ge=1024, le=1 << 30,
                                description="Larger request bodies get 413.")

    queues: str | None = Field(
        default=None, description="Embedded fleet: a YAML list of tenant queues (each a name "
        "and the fields of a TenantQueue spec) or TenantQueue objects, with any TenantCohorts "
        "of their cohorts, the same file as "
        "`ultraplane simulate --queues`.")

    power_budgets: str | None = Field(
        default=None, description="Embedded fleet: a YAML list of power budgets (each a name "
        "and the fields of a PowerBudget spec) or PowerBudget objects, the same file as "
        "`ultraplane simulate --power-budget`.")

    inference_trace: str | None = Field(
        default=None, description="Embedded fleet: the request trace (Azure LLM inference CSV: "
        "TIMESTAMP, ContextTokens, GeneratedTokens) offered to each autoscaled InferenceJob "
        "from its creation, looping; by default a built-in day shape.")
    inference_rate_scale: float = Field(
        default=1.0, gt=0, le=1e6, description="Embedded fleet: multiple of the trace's rate.")
    autoscale_seconds: float = Field(
        default=30.0, gt=0, le=86400, description="Embedded fleet: simulated seconds between "
        "the planner's steps for each autoscaled InferenceJob.")

    @field_validator("inference_trace")
    @classmethod
    def _trace_file(cls, value: str | None) -> str | None:
        if value is not None:
            cls.read_trace(value)
        return value

    @staticmethod
    def read_trace(path: str) -> Any:
        """The `--inference-trace` file's requests, or ValueError with one sentence."""
        from ultraplane.serving.requesttraces import RequestTrace

        try:
            return RequestTrace.load(Path(path))
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None

    @field_validator("queues", "power_budgets")
    @classmethod
    def _policy_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            (cls.read_queues if info.field_name == "queues" else cls.read_budgets)(value)
            if info.field_name == "queues":
                cls.read_cohorts(value)
        return value

    @staticmethod
    def read_budgets(path: str) -> list[Any]:
        """The budgets of a `--power-budgets` file, or ValueError with one sentence."""
        from ultraplane.policies.budgetdocuments import budget_file

        return budget_file(path)

    @staticmethod
    def read_queues(path: str) -> list[Any]:
        """The queues of a `--queues` file, or ValueError with one sentence."""
        from ultraplane.policies.queuedocuments import queue_file

        return queue_file(path)

    @staticmethod
    def read_cohorts(path: str) -> list[Any]:
        """The cohorts of a `--queues` file (its TenantCohort entries), or ValueError with
        one sentence (parents that form a cycle among them)."""
        from ultraplane.policies.cohortdocuments import cohort_file

        return cohort_file(path)

    @field_validator("fleet")
    @classmethod
    def _fleet_shape(cls, value: str) -> str:
        from ultraplane.hardware.topology import MAX_ULTRASERVERS

        profile, sep, count = value.partition(":")
        if not profile or (sep and not (count.isascii() and count.isdigit())) or (
                sep and int(count) < 1):
            raise ValueError("fleet must look like PROFILE:COUNT, e.g. trn3-gen2:8")
        if sep and (len(count) > 9 or int(count) > MAX_ULTRASERVERS):
            raise ValueError(f"fleet COUNT must be at most {MAX_ULTRASERVERS} UltraServers")
        return value

    @field_validator("rate_limit_dryruns", "rate_limit_writes", "rate_limit_reads")
    @classmethod
    def _rate(cls, value: str) -> str:
        from limits import parse

        if value.strip().lower() not in ("", "off", "none"):
            try:
                parse(value)
            except ValueError:
                raise ValueError(f"{value!r} is not a rate like 600/second") from None
        return value

    def rate_limits(self) -> Limits:
        """The per-client limits, one per class of request."""
        from ultraplane.api.guards.ratelimits import Limits

        return Limits(dryruns=self.rate_limit_dryruns, writes=self.rate_limit_writes,
                      reads=self.rate_limit_reads)

    def fleet_profile_and_count(self) -> tuple[str, int]:
        """Split `trn3-gen2:8`; a bare profile name means one UltraServer."""
        profile, _, count = self.fleet.partition(":")
        return profile, int(count or 1)
