"""A query parameter given twice is refused with a sentence naming it (schemathesis found
GET /v1/accounting/jobs?namespace=a&namespace=b answered 200 with the last value)."""

from __future__ import annotations

import asyncio
from typing import Any

from ultraplane.api.guards.bodylimits import SingleQueryValues


def call(query: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    reached: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v1/accounting/jobs", "headers": [],
             "query_string": query}
    asyncio.run(SingleQueryValues(app)(scope, receive, send))
    return sent if not reached else [{"reached": True}]


def test_a_repeated_query_parameter_is_a_422_naming_it() -> None:
    sent = call(b"namespace=a&namespace=b&name=x")
    assert sent[0]["status"] == 422
    assert b"namespace" in sent[1]["body"] and b"more than once" in sent[1]["body"]


def test_single_values_pass_through() -> None:
    assert call(b"namespace=a&name=x&limit=5") == [{"reached": True}]
    assert call(b"") == [{"reached": True}]
