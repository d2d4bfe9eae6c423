"""The files `--queues` and `--power-budgets` name: one reading for every command.

Why one reading: `ultraplane simulate` and `ultraplane serve` each read these files, against
schemas of their own (a bare number of chips for a queue's nominal quota in one, a `budgets:`
key and top-level selectors in the other), and neither was the schema of the TenantQueue and
PowerBudget resources. Now a file is read here, and each entry is checked by the resource's
own spec model (`queuedocuments.queue_specs`, `budgetdocuments.budget_specs`), so one file works for
the simulator, for `serve` and, as manifests, for `kubectl apply`.

A file holds either
- a YAML list whose entries are each a `name` and the fields of the resource's spec, or
- the resources themselves, as `kubectl apply -f` takes them: a list of them, or the
  documents of a multi-document file (`examples/queues/`, `examples/power/`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ultraplane.resources.commons import API_VERSION

__all__ = ["named_specs", "read_documents"]


def read_documents(path: str | Path) -> Any:
    """The YAML of `path`: its one document, or the list of its documents when it has more
    (a file of manifests separated by `---`); ValueError with one sentence naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return documents[0] if len(documents) == 1 else documents


def named_specs(data: list[Any], kind: str, noun: str,
                error: type[ValueError]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, spec fields) of each entry of a policy file's list: a `name` with the fields of
    a `kind` spec, or a `kind` object (apiVersion, kind, metadata.name, spec). `error`, with
    `noun` and the entry's number or name, says what is wrong with an entry."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for i, entry in enumerate(data, start=1):
        if isinstance(entry, Mapping) and "kind" in entry and "name" not in entry:
            out.append(_object(entry, i, kind, noun, error))
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            out.append((str(entry["name"]), {k: v for k, v in entry.items() if k != "name"}))
        else:
            raise error(f"{noun} {i}: expected a mapping with a name (and the fields of a "
                        f"{kind} spec), or a {kind} object")
    return out


def _object(entry: Mapping[str, Any], i: int, kind: str, noun: str,
            error: type[ValueError]) -> tuple[str, Mapping[str, Any]]:
    """A resource as `kubectl apply` takes it: its name and its spec."""
    if entry.get("kind") != kind:
        raise error(f"{noun} {i}: a {entry.get('kind')!r} object, not a {kind}")
    if entry.get("apiVersion") != API_VERSION:
        raise error(f"{noun} {i}: apiVersion must be {API_VERSION}, got "
                    f"{entry.get('apiVersion')!r}")
    meta, spec = entry.get("metadata"), entry.get("spec")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise error(f"{noun} {i}: metadata.name is missing")
    if not isinstance(spec, Mapping):
        raise error(f"{noun} {name}: spec must be a mapping")
    return name, spec
