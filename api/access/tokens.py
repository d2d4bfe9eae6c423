"""Static bearer tokens and what each one may do.

A token file line is the token, then optional scope fields:

    s3cret                                        # every namespace, every verb
    team-a-ci  namespaces=team-a  verbs=get,list,create,delete  name=ci-a
    viewer     namespaces=*       verbs=get,list

`namespaces` is a comma list of namespaces (or `*` for all), `verbs` a comma list
of the Kubernetes verbs the API checks (`get`, `list`, `create`, `delete`, `patch`: an
UltraServer's failed chips and cordons, which only an every-namespace grant reaches, or `*`),
`name` the caller's name in logs and 403 messages. Tokens from
`ULTRAPLANE_API_TOKENS` (comma-separated) have no scope fields: they may do
everything, as before scopes existed. A malformed line is a startup error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ultraplane.api.settings import Settings

VERBS = frozenset({"get", "list", "create", "delete", "patch"})


@dataclass(frozen=True)
class Grant:
    """What one static token allows: `namespaces` None means every namespace."""

    verbs: frozenset[str] = VERBS
    namespaces: frozenset[str] | None = None

    def allows(self, verb: str, namespace: str | None) -> bool:
        """`namespace` None is a request across all namespaces: only an all-namespace grant."""
        if verb not in self.verbs:
            return False
        if self.namespaces is None:
            return True
        return namespace is not None and namespace in self.namespaces


@dataclass(frozen=True)
class StaticToken:
    token: str
    name: str
    grant: Grant


def _split(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def parse_line(line: str, *, where: str) -> StaticToken:
    """One token-file line -> token with its grant; ValueError naming `where` if malformed."""
    token, *fields = line.split()
    name = "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]
    verbs, namespaces = VERBS, None
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep or not value:
            raise ValueError(f"{where}: {field!r} is not KEY=VALUE (namespaces=, verbs=, name=)")
        if key == "namespaces":
            names = _split(value)
            namespaces = None if "*" in names else names
        elif key == "verbs":
            asked = _split(value)
            verbs = VERBS if "*" in asked else asked
            unknown = sorted(verbs - VERBS)
            if unknown:
                raise ValueError(f"{where}: unknown verb {unknown[0]!r}; "
                                 f"known verbs: {', '.join(sorted(VERBS))}")
        elif key == "name":
            name = value
        else:
            raise ValueError(f"{where}: unknown field {key!r} (namespaces=, verbs=, name=)")
    return StaticToken(token=token, name=name, grant=Grant(verbs=verbs, namespaces=namespaces))


def _lines(text: str) -> Iterable[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield number, line


def load_tokens(settings: Settings) -> tuple[StaticToken, ...]:
    """All static tokens; a missing, unreadable or malformed token file is a startup error."""
    tokens = [parse_line(t.strip(), where="ULTRAPLANE_API_TOKENS")
              for t in settings.api_tokens.split(",") if t.strip()]
    if settings.token_file:
        path = Path(settings.token_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise ValueError(f"token file {path} cannot be read: {reason}") from exc
        found = [parse_line(line, where=f"token file {path} line {number}")
                 for number, line in _lines(text)]
        if not found:  # an empty file must never mean "no authentication" by accident
            raise ValueError(f"token file {path} holds no token (it is empty or only "
                             f"comments); add a token, or leave out --token-file to serve open")
        tokens.extend(found)
    return tuple(tokens)
