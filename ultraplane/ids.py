"""Typed identifiers for UltraServers, chips and jobs.

Why NewTypes: a chip id, a server id and a job key are all strings on the wire (CRD status, REST
bodies, YAML), and mixing them up is the classic bug of a scheduler. The types cost nothing at
run time and let mypy catch a job key passed where a chip id belongs. The formats are part of
the contract in docs/core-api.md, so they are built and parsed only here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NewType

__all__ = [
    "ChipId",
    "JobKey",
    "ServerId",
    "UltraServerName",
    "chip_id",
    "chip_ranges",
    "job_key",
    "kind_of_job_key",
    "local_ref",
    "namespace_of_job_key",
    "parse_chip_id",
    "parse_chip_ranges",
    "parse_job_key",
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
_RANGE = re.compile(r"^(?P<us>[^/\s]+)/s(?P<s0>\d{2,})(?:-s(?P<s1>\d{2,}))?"
                    r"/c(?P<c0>\d{2,})(?:-c(?P<c1>\d{2,}))?$")
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


def parse_job_key(key: str) -> tuple[str, str, str]:
    """(kind, namespace, name) of a job key or of one of its replica keys
    (`ij/serving/chat#1` -> `("InferenceJob", "serving", "chat")`)."""
    _, namespace, name = key.split("#", 1)[0].split("/", 2)
    return kind_of_job_key(key), namespace, name


def namespace_of_job_key(key: str) -> str:
    """The namespace of a job key (`tj/research/llama` -> `research`); "" for a key without one
    (the replay's plain trace ids)."""
    parts = key.split("/", 2)
    return parts[1] if len(parts) == 3 else ""


def chip_ranges(chips: Iterable[str]) -> str:
    """Chip ids, in the order given, as comma-separated ranges `<ultraserver>/sA[-sB]/cX[-cY]`:
    chips cX..cY of each server sA..sB (`gen2-0003/s00-s35/c00-c03`: a whole Gen2 UltraServer;
    a lone chip id is a range too). Consecutive servers with the same chips share a range, so a
    144-chip gang is a few dozen bytes instead of 2 KB; `parse_chip_ranges` gives the list back."""
    runs: list[tuple[str, int, int, int, int]] = []  # (us, first server, last, first chip, last)
    for chip in chips:
        us, server, index = parse_chip_id(chip)
        if runs:
            r_us, s0, _, c0, c1 = runs[-1]
            if (r_us, s0) == (us, server) and index == c1 + 1:
                runs[-1] = (us, s0, s0, c0, index)  # the next chip of the same server
                continue
        runs.append((us, server, server, index, index))
    merged: list[tuple[str, int, int, int, int]] = []
    for run in runs:  # servers in a row holding the same chips
        if merged:
            m_us, s0, s1, c0, c1 = merged[-1]
            if (run[0], run[3], run[4]) == (m_us, c0, c1) and run[1] == s1 + 1:
                merged[-1] = (m_us, s0, run[2], c0, c1)
                continue
        merged.append(run)
    return ",".join(
        f"{us}/s{s0:02d}" + (f"-s{s1:02d}" if s1 != s0 else "")
        + f"/c{c0:02d}" + (f"-c{c1:02d}" if c1 != c0 else "")
        for us, s0, s1, c0, c1 in merged)


def parse_chip_ranges(text: str) -> list[ChipId]:
    """The chip ids of `chip_ranges` text, in its order (server by server, chips in order);
    raises ValueError with a sentence."""
    chips: list[ChipId] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        match = _RANGE.match(item)
        if match is None:
            raise ValueError(f"chip range {item!r} is not of the form "
                             "'<ultraserver>/sNN[-sNN]/cNN[-cNN]', e.g. 'gen2-0007/s00-s35/c00-c03'")
        s0, c0 = int(match["s0"]), int(match["c0"])
        s1, c1 = int(match["s1"] or s0), int(match["c1"] or c0)
        if s1 < s0 or c1 < c0:
            raise ValueError(f"chip range {item!r} runs backwards")
        chips.extend(chip_id(match["us"], s, c) for s in range(s0, s1 + 1)
                     for c in range(c0, c1 + 1))
    return chips
