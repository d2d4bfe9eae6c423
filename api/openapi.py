"""The OpenAPI document, made to say exactly what this app does.

FastAPI's generated document knows the models and parameters; it does not know the
rules that live in validators (`work` needs exactly one kind of work, `load` exactly
one rate), the answers that come from middleware and handlers (400 malformed JSON,
413 too large, 405 with `Allow`, 401/403 from the guard), or which operations need
a token in this app's auth mode. This module adds them, once per app, so clients
and schemathesis (which runs every check against it in CI) see the server as it is.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from ultraplane.api.access.auth import Guard
from ultraplane.api.errors import ApiError

ERROR = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
# Dry runs (/v1/placements) are not among them: once tokens are on, they need one (CPU).
FLEET_READS = ("/v1/ultraservers", "/v1/capacity", "/v1/tenantqueues", "/v1/powerbudgets")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

# Rules the spec models enforce in validators (and the CRDs in CEL), as JSON Schema. The models
# read an explicit null as "not given", so each branch says which fields must hold a value and
# which must be absent or null (`required` alone counts a null as given: a body with
# `"tokensPerSecond": null` beside a rate matched both load branches, so the document called
# invalid what the server rightly accepts).
_SET: dict[str, Any] = {"not": {"type": "null"}}
_UNSET: dict[str, Any] = {"type": "null"}


def _branch(given: tuple[str, ...], absent: tuple[str, ...]) -> dict[str, Any]:
    return {"required": list(given),
            "properties": {**{n: _SET for n in given}, **{n: _UNSET for n in absent}}}


ONE_OF: dict[str, list[dict[str, Any]]] = {
    "Work": [_branch(("durationSeconds",), ("steps", "tokensPerStep")),
             _branch(("steps", "tokensPerStep"), ("durationSeconds",))],
    "LoadTarget": [_branch(("requestsPerSecond",), ("tokensPerSecond",)),
                   _branch(("tokensPerSecond",), ("requestsPerSecond",))],
}


# Request examples, shown by Swagger UI and ReDoc and tried by schemathesis' explicit phase:
# the repository's examples/ manifests as JSON bodies (tests post each one to a real app).
_TRAINING_SMALL = {
    "metadata": {"name": "finetune-8b", "labels": {"team": "research"}},
    "spec": {"chips": 4, "profile": "trn3-gen2", "topology": {"requiredLevel": "server"},
             "priority": 10, "precision": "BF16",
             "model": {"name": "llama-3.1-8b", "parametersBillions": 8},
             "work": {"steps": 2000, "tokensPerStep": 1048576},
             "checkpointIntervalSeconds": 300, "failurePolicy": "RestartAll"}}
_TRAINING_BIG = {
    "metadata": {"name": "pretrain-405b"},
    "spec": {"chips": 288, "profile": "trn3-gen2",
             "topology": {"requiredLevel": "network-1", "preferredLevel": "ultraserver",
                          "wholeServers": True},
             "priority": 100, "precision": "MXFP8",
             "model": {"name": "llama-3.1-405b", "parametersBillions": 405},
             "work": {"steps": 50000, "tokensPerStep": 16777216},
             "checkpointIntervalSeconds": 1800, "failurePolicy": "ReplaceAffected"}}
_INFERENCE = {
    "metadata": {"name": "chat-70b"},
    "spec": {"replicas": 4, "chipsPerReplica": 16, "profile": "trn3-gen2",
             "topology": {"requiredLevel": "rack", "wholeServers": True}, "priority": 50,
             "precision": "FP8", "model": {"name": "llama-3.3-70b", "parametersBillions": 70},
             "load": {"tokensPerSecond": 20000},
             "latencySLO": {"timeToFirstTokenMs": 500, "timePerOutputTokenMs": 40}}}
REQUEST_EXAMPLES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("post", "/v1/namespaces/{namespace}/trainingjobs"): {
        "small": {"summary": "4 chips inside one server, 2,000 steps", "value": _TRAINING_SMALL},
        "multi-ultraserver": {"summary": "288 chips over two UltraServers of one EFA block",
                              "value": _TRAINING_BIG}},
    ("post", "/v1/namespaces/{namespace}/inferencejobs"): {
        "chat": {"summary": "4 replicas of 16 chips, each inside one rack", "value": _INFERENCE}},
    ("post", "/v1/placements:dryRun"): {
        "whole-ultraserver": {"summary": "144 chips that must stay inside one UltraServer",
                              "value": {"chips": 144, "requiredLevel": "ultraserver",
                                        "priority": 50, "alternatives": 2}},
        "small": {"summary": "16 chips on whole servers of one rack",
                  "value": {"chips": 16, "requiredLevel": "rack", "wholeServers": True}}},
}


def _add_examples(schema: dict[str, Any]) -> None:
    for (method, path), examples in REQUEST_EXAMPLES.items():
        op = schema.get("paths", {}).get(path, {}).get(method)
        media = (op or {}).get("requestBody", {}).get("content", {}).get("application/json")
        if media is not None:
            media["examples"] = examples


def _error(description: str, **headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, **ERROR}
    if headers:
        answer["headers"] = {name: {"description": text, "schema": {"type": "string"}}
                             for name, text in headers.items()}
    return answer


def _secured(path: str, method: str, guard: Guard) -> bool:
    if not guard.enabled or not path.startswith("/v1/"):
        return False
    # only reading the fleet is open (a PATCH of an UltraServer is a write)
    return guard.protect_reads or method != "get" or not path.startswith(FLEET_READS)


def complete(schema: dict[str, Any], guard: Guard, *, kubernetes: bool) -> dict[str, Any]:
    """Add what the generated document leaves out (see the module docstring)."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name, branches in ONE_OF.items():
        if name in schemas:
            schemas[name]["oneOf"] = branches
    for path, item in schema.get("paths", {}).items():
        served = [m for m in METHODS if m in item]
        for method in served:
            op = item[method]
            responses = op.setdefault("responses", {})
            if "requestBody" in op:
                responses.setdefault("400", _error("The body is not valid JSON."))
                responses.setdefault("413", _error("The body is larger than the limit "
                                                   "(ULTRAPLANE_MAX_BODY_BYTES, 1 MiB)."))
            # Every 422 has the one error shape (FastAPI documents its own list of pydantic
            # errors, which this app never sends).
            responses["422"] = _error("Invalid input (also: an unknown query parameter); "
                                      "`field` names it.")
            responses.setdefault("405", _error(
                "Method not allowed on this path.", Allow="The methods this path serves."))
            if "{" in path:
                responses.setdefault("404", _error("No such object."))
            if path.startswith("/v1/"):
                responses.setdefault("429", _error(
                    "This client sent more requests of this kind than its rate limit allows.",
                    **{"Retry-After": "Seconds to wait."}))
            if path == "/v1/placements:dryRun":
                responses.setdefault("503", _error(
                    "The preemption plan would take too long now, or another is running.",
                    **{"Retry-After": "Seconds to wait."}))
            if any(p.get("name") == "continue" for p in op.get("parameters", [])):
                responses.setdefault("410", _error("The continue token has expired."))
            if kubernetes and path.startswith("/v1/"):
                responses.setdefault("502", _error("The API server answered an error."))
                responses.setdefault("503", _error("The API server is unreachable or refuses "
                                                   "this API's credentials."))
            if _secured(path, method, guard):
                op["security"] = [{"HTTPBearer": []}]
                responses.setdefault("401", _error(
                    "No bearer token, or one that is not accepted.",
                    **{"WWW-Authenticate": "Bearer"}))
                responses.setdefault("403", _error(
                    "The caller may not do this (verb, resource, namespace)."))
            else:
                op.pop("security", None)
                responses.pop("401", None)
                responses.pop("403", None)
    if not guard.enabled:
        components.get("securitySchemes", {}).pop("HTTPBearer", None)
    _add_examples(schema)
    return schema


def install(app: FastAPI, guard: Guard, *, kubernetes: bool) -> None:
    """Replace `app.openapi` with the completed document (built once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            app.openapi_schema = complete(schema, guard, kubernetes=kubernetes)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _query_index(app: FastAPI) -> list[tuple[re.Pattern[str], dict[str, frozenset[str]]]]:
    index = getattr(app.state, "query_index", None)
    if index is None:
        index = []
        for template, item in app.openapi().get("paths", {}).items():
            pattern = re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)))
            names = {m: frozenset(p["name"] for p in op.get("parameters", []) if p.get("in") == "query")
                     for m, op in item.items() if m in METHODS}
            index.append((pattern, names))
        app.state.query_index = index
    return index


async def reject_unknown_query(request: Request) -> None:
    """A query parameter the operation does not declare is a 422 naming it, as unknown body
    fields are: `?limt=5` must not silently mean the default page."""
    if not request.query_params:
        return
    path, method = request.url.path, request.method.lower()
    for pattern, names in _query_index(request.app):
        if method in names and pattern.fullmatch(path):
            for name in request.query_params:
                if name not in names[method]:
                    raise ApiError(422, "ValidationError", f"query.{name[:40]}",
                                   f"query.{name[:40]}: unknown query parameter")
            return
