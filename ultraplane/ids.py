"""Typed identifiers for UltraServers, chips and jobs.

Why NewTypes: a chip id, a server id and a job key are all strings on the wire (CRD status, REST
bodies, YAML), and mixing them up is the classic bug of a scheduler. The types cost nothing at
run time and let mypy catch a job key passed where a chip id belongs. The formats are part of
the contract in docs/core-api.md, so they are built and parsed only here.
"""

from __future__ import annotations

import re
from typing import NewType

__all__ = [
    "ChipId",
    "JobKey",
    "ServerId",
    "UltraServerName",
    "chip_id",
    "job_key",
    "kind_of_job_key",
    "local_ref",
    "parse_chip_id",
    "parse_local_ref",
    "server_id",
]

UltraServerName = NewType("UltraServerName", str)
ChipId = NewType("ChipId", str)
ServerId = NewType("ServerId", str)
JobKey = NewType("JobKey", str)

# The kind prefix of a Kubernetes job's key: a TrainingJob and an InferenceJob of the same
# namespace/name must never share a queue entry or a chip.
JOB_KEY_PREFIXES = {"TrainingJob": "tj", "InferenceJob": "ij"}

_CHIP = re.compile(r"^(?P<us>[^/\s]+)/s(?P<server>\d{2,})/c(?P<chip>\d{2,})$")
_LOCAL = re.compile(r"^s(?P<server>\d{2,})/c(?P<chip>\d{2,})$")


def chip_id(ultraserver: str, server: int, chip: int) -> ChipId:
    """`gen2-0007/s03/c01`: the UltraServer name, then server and chip indices (2+ digits)."""
    return ChipId(f"{ultraserver}/s{server:02d}/c{chip:02d}")


def server_id(ultraserver: str, server: int) -> ServerId:
    """`gen2-0007/s03`."""
    return ServerId(f"{ultraserver}/s{server:02d}")


def local_ref(server: int, chip: int) -> str:
    """A chip's reference inside its UltraServer, as in `spec.failedChips`: `s03/c01`."""
    return f"s{server:02d}/c{chip:02d}"


def parse_chip_id(value: str) -> tuple[UltraServerName, int, int]:
    """Split a chip id into (UltraServer, server, chip); raises ValueError with a sentence."""
    match = _CHIP.match(value)
    if match is None:
        raise ValueError(
            f"chip id {value!r} is not of the form '<ultraserver>/sNN/cNN', e.g. 'gen2-0007/s03/c01'"
        )
    return UltraServerName(match["us"]), int(match["server"]), int(match["chip"])


def parse_local_ref(value: str) -> tuple[int, int]:
    """Split a local chip ref `s03/c01` into (server, chip); raises ValueError with a sentence."""
    match = _LOCAL.match(value)
    if match is None:
        raise ValueError(f"chip reference {value!r} is not of the form 'sNN/cNN', e.g. 's03/c01'")
    return int(match["server"]), int(match["chip"])


def job_key(kind: str, namespace: str, name: str) -> JobKey:
    """`tj/research/llama` (TrainingJob) or `ij/serving/chat` (InferenceJob); an InferenceJob's
    replica `i` is held under `<key>#i`. Unknown kinds are treated as TrainingJob."""
    prefix = JOB_KEY_PREFIXES.get(kind, JOB_KEY_PREFIXES["TrainingJob"])
    return JobKey(f"{prefix}/{namespace}/{name}")


def kind_of_job_key(key: str) -> str:
    """The kind a job key (or replica key) belongs to."""
    return "InferenceJob" if key.startswith(f"{JOB_KEY_PREFIXES['InferenceJob']}/") else "TrainingJob"
