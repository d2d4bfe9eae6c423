"""`Annotated` dependency aliases shared by the routers (the app keeps one of each)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlmodel import Session
from ultraplane.api.backends import Backend

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


async def get_backend(request: Request) -> Backend:
    # async: a sync dependency would cost a thread hop on every request (the hot path)
    backend: Backend = request.app.state.backend
    return backend


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


BackendDep = Annotated[Backend, Depends(get_backend)]
SessionDep = Annotated[Session, Depends(get_session)]
NamespacePath = Annotated[
    str, Path(min_length=1, max_length=63, pattern=NAME_PATTERN, description="Namespace.")
]
NamePath = Annotated[
    str, Path(min_length=1, max_length=253, pattern=NAME_PATTERN, description="Object name.")
]
