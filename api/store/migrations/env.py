"""Alembic environment: uses the connection the app passes in, or the configured URL."""

from __future__ import annotations

import ultraplane.api.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

target_metadata = SQLModel.metadata
config = context.config


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    engine = create_engine(str(url))
    with engine.begin() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run_migrations()
