"""One error shape for every failure: `{"error", "field", "message"}`.

FastAPI's default 422 body is a list of pydantic internals; a scheduler portal
wants one sentence and the field to highlight. Genuine bugs still become a
500 (logged with the traceback), but bad input never does.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from ultraplane.api import problems as problems_

log = logging.getLogger("ultraplane.api")


class FieldProblem(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    error: str
    field: str | None = None
    message: str
    problems: list[FieldProblem] | None = Field(
        default=None, description="Every problem of the request (validation errors), when "
                                  "there is more than one; `field` and `message` sum them up.")


class ApiError(Exception):
    """An expected failure with its HTTP status, e.g. 404 for an unknown job."""

    def __init__(self, status: int, error: str, field: str | None, message: str,
                 *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.field = field
        self.message = message
        self.headers = headers or {}  # e.g. Retry-After on a 503


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


def first_error(errors: list[Any], *, prefix: str = "") -> tuple[str, str]:
    """The field path and sentence of the first pydantic error."""
    if not errors:
        return prefix.rstrip(".") or "body", "the request is invalid"
    err = errors[0]
    field = prefix + _loc(err.get("loc", ()))
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return field or "body", f"{field}: {message}" if field else message


def error_response(status: int, error: str, field: str | None, message: str,
                   problems: list[problems_.Problem] | None = None) -> JSONResponse:
    body = ErrorBody(error=error, field=field, message=message).model_dump()
    if problems and len(problems) > 1:
        body["problems"] = [{"field": p.field, "message": p.message}
                            for p in problems[:problems_.MAX_SHOWN]]
    else:
        body.pop("problems")
    return JSONResponse(status_code=status, content=body)


def _body_model(request: Request) -> type[BaseModel] | None:
    """The request body's model of the route that refused it (for "did you mean")."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _allowed_methods(request: Request) -> str:
    """Every method some operation serves on this path (Starlette names only one route's).

    Read from the app's own OpenAPI paths, so it is exactly what the document says.
    """
    import re

    path = request.url.path
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {m.upper() for m in operations if m != "parameters"}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the same shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        response = error_response(exc.status, exc.error, exc.field, exc.message)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if errors and errors[0].get("type") == "json_invalid":
            detail = (errors[0].get("ctx") or {}).get("error", "")
            return error_response(400, "BadRequest", "body",
                                  f"the request body is not valid JSON: {detail}".rstrip(": "))
        found = problems_.describe(errors, model=_body_model(_request), skip=1)
        field, message = problems_.summary(found)
        return error_response(422, "ValidationError", field, message, found)

    @app.exception_handler(ValidationError)
    async def _model_validation(_request: Request, exc: ValidationError) -> JSONResponse:
        found = problems_.describe(list(exc.errors()), prefix="body.spec.")
        field, message = problems_.summary(found)
        return error_response(422, "ValidationError", field, message, found)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed",
                 401: "Unauthorized", 413: "PayloadTooLarge"}
        error = names.get(exc.status_code, "HTTPError")
        field = "body" if exc.status_code in (400, 413) else None
        response = error_response(exc.status_code, error, field, str(exc.detail))
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        if exc.status_code == 405:
            response.headers["Allow"] = _allowed_methods(_request)
        return response

    @app.exception_handler(SQLAlchemyError)
    async def _store(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        """The store failed under a request (full, read-only, gone): 503, never a 500."""
        from ultraplane.api.store.claims import reason, unavailable

        log.warning("store error on %s %s: %s", request.method, request.url.path, reason(exc))
        saving = request.method not in ("GET", "HEAD", "OPTIONS")
        return await _api_error(request, unavailable(request.app.state.engine.url, exc,
                                                     saving=saving))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "InternalError", None, "internal error; see the server log")
