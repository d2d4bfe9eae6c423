"""`apply -f`: manifests in YAML or JSON, one document or several, files or stdin.

Why checked here before anything is sent: a multi-document file is applied in order, and a
typo in the third document should stop the command before the first is created, with one
sentence naming the file and the document (exit 2). The spec itself is the server's to judge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ultraplane.api.client.transports import ClientError

from ultraplane.documents.conversions import GROUP, PLURALS

KINDS = tuple(PLURALS)


@dataclass(frozen=True)
class Manifest:
    source: str  # `file.yaml#2`, for messages
    kind: str
    name: str
    namespace: str | None
    body: dict[str, Any]


def _bad(where: str, message: str) -> ClientError:
    return ClientError(f"{where}: {message}", 2)


def read(path: str, stdin: str | None = None) -> str:
    if path == "-":
        return stdin or ""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise _bad(path, f"cannot read it ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise _bad(path, "is not a text file.") from None


def parse(path: str, text: str) -> list[Manifest]:
    """Every document of `text` (YAML, of which JSON is a subset; a kubectl `List` is unrolled)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML or JSON"
        raise _bad(path, f"cannot parse it{at}: {problem}.") from None
    if not docs:
        raise _bad(path, "holds no manifest.")
    out: list[Manifest] = []
    for index, doc in enumerate(docs, start=1):
        where = path if len(docs) == 1 else f"{path} (document {index})"
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items or []:
            out.append(_manifest(where, item))
    return out


def _manifest(where: str, doc: Any) -> Manifest:
    if not isinstance(doc, dict):
        raise _bad(where, f"a manifest is a mapping, not {type(doc).__name__}.")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind not in KINDS:
        raise _bad(where, f"kind {kind!r} is not one of {', '.join(KINDS)}.")
    if not isinstance(api_version, str) or api_version.split("/", 1)[0] != GROUP:
        raise _bad(where, f"apiVersion {api_version!r} is not {GROUP}/<version>.")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise _bad(where, "metadata.name is required.")
    if not isinstance(doc.get("spec"), dict):
        raise _bad(where, "spec is required and must be a mapping.")
    namespace = meta.get("namespace")
    return Manifest(where, kind, meta["name"], namespace if isinstance(namespace, str) else None,
                    json.loads(json.dumps(doc, default=str)))
