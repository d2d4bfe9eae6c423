"""Pydantic's validation errors as sentences a person can act on, all of them at once.

Why not pydantic's own text: it reports a typo'd field twice and names it never as a typo
(`chps` gives "chips: Field required" and "chps: Extra inputs are not permitted"), and
FastAPI's default body shows only internals. Here every problem of a body is reported in one
answer (up to `MAX_SHOWN`, then a count), and an unknown field is named with the closest
known field at the same place: "unknown field chps; did you mean chips?". The missing field
that the typo was meant to be is then not reported a second time.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

MAX_SHOWN = 20


@dataclass(frozen=True)
class Problem:
    field: str
    message: str


def _unwrap(tp: Any) -> list[Any]:
    """The classes a field annotation may hold (Optional, unions and Annotated opened)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _unwrap(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [c for arg in get_args(tp) for c in _unwrap(arg)]
    return [tp]


def _models(tp: Any) -> list[type[BaseModel]]:
    return [c for c in _unwrap(tp) if isinstance(c, type) and issubclass(c, BaseModel)]


def _wire_names(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def known_fields(model: type[BaseModel] | None, loc: Sequence[Any]) -> list[str]:
    """The field names (as on the wire) of the object at `loc` inside `model`, if known."""
    if model is None:
        return []
    candidates: list[Any] = [model]
    for part in loc:
        if isinstance(part, int):  # a list item: the list's element type
            candidates = [a for c in candidates for a in get_args(c) if get_origin(c) is list]
            continue
        following: list[Any] = []
        for cls in (m for c in candidates for m in _models(c)):
            fields = _wire_names(cls)
            if part in fields:
                following.extend(_unwrap(fields[part]))
        if not following:  # a union member's tag or a validator's name: stay where we are
            continue
        candidates = following
    names: list[str] = []
    for cls in (m for c in candidates for m in _models(c)):
        names.extend(n for n in _wire_names(cls) if n not in names)
    return names


def _loc(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


def describe(errors: Sequence[Any], *, prefix: str = "",
             model: type[BaseModel] | None = None, skip: int = 0) -> list[Problem]:
    """One `Problem` per error; `skip` leading loc parts (e.g. "body") are not model fields."""
    typos: dict[tuple[Any, ...], str] = {}  # (parent loc, meant name) -> the typo
    for err in errors:
        loc = tuple(err.get("loc", ()))
        if err.get("type") == "extra_forbidden" and loc:
            known = known_fields(model, loc[skip:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            if close:
                typos[(loc[:-1], close[0])] = str(loc[-1])
    problems: list[Problem] = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        field = prefix + _loc(loc)
        kind = err.get("type")
        if kind == "missing" and loc and (loc[:-1], loc[-1]) in typos:
            continue  # reported as the typo that was meant to be it
        if kind == "extra_forbidden" and loc:
            parent = prefix + _loc(loc[:-1])
            where = f" in {parent}" if parent else ""
            meant = next((m for (p, m), t in typos.items() if p == loc[:-1] and t == loc[-1]), None)
            hint = f"; did you mean {meant}?" if meant else ""
            problems.append(Problem(field, f"unknown field {loc[-1]}{where}{hint}"))
            continue
        message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        problems.append(Problem(field or "body", f"{field}: {message}" if field else message))
    return problems


def summary(problems: Sequence[Problem]) -> tuple[str, str]:
    """(field of the first problem, one message naming every problem, capped at MAX_SHOWN)."""
    if not problems:
        return "body", "the request is invalid"
    if len(problems) == 1:
        return problems[0].field, problems[0].message
    shown = "; ".join(p.message for p in problems[:MAX_SHOWN])
    more = len(problems) - MAX_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return problems[0].field, f"{len(problems)} problems: {shown}{tail}"
