"""The ASGI app of ``retrieval serve``: :func:`create_app` (FastAPI; the OpenAPI page is ``/docs``).

Every request first goes through :class:`retrieval.web.guard.Guard` (the ``Host`` allow-list, the token,
cross-site writes, the body size as it arrives, the security headers). Token: when the server has one, every request
(pages, API, static files, ``/docs``) must carry it, as ``Authorization: Bearer TOKEN``, as ``?token=TOKEN`` in the
URL, or as the ``retrieval_token`` cookie that a page opened with ``?token=`` sets (HttpOnly, SameSite=Strict), so
a browser needs the token in the first URL only. It is compared with :func:`hmac.compare_digest`.

Errors are ``{"error": "one line"}`` with the status code (400 bad input, 401 token, 403 cross-site write, 404
unknown id, 413 too large, 415 not an image, 409 conflict with the index's state, 421 foreign Host, 503 index being
built or read-only, 507 no space left); never a traceback (an unexpected error is logged by the server and answered
500 with its type). A write refused by the disk (full, read-only, no permission, an I/O error) is answered with its
real cause (:func:`storage_answer`) and changed nothing; a 2xx write is committed and searchable.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from importlib import resources

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from retrieval._version import __version__
from retrieval.app.read_only import IndexReadOnly, storage_cause
from retrieval.web.guard import Guard, HostPolicy
from retrieval.web.service import Service
from retrieval.web.uploads import ApiError

logger = logging.getLogger(__name__)

STATIC_FILES = {"app.js": "text/javascript; charset=utf-8", "docs.js": "text/javascript; charset=utf-8",
                "duplicates.js": "text/javascript; charset=utf-8", "grid.js": "text/javascript; charset=utf-8",
                "match.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
                "favicon.svg": "image/svg+xml"}
"""The only static files served (by name from this fixed list, never by a path from the request)."""
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8",
                 "favicon.png": "image/png"}
"""The Swagger UI files of the ``/docs`` page (Swagger UI 5, which reads OpenAPI 3.1), served from the static folder
of the ``fastapi-offline`` package (by name from this fixed list): the page works without access to the internet."""
DOCS_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>retrieval: the JSON API</title>
<link rel="stylesheet" href="/static/swagger/swagger-ui.css"><link rel="icon" href="/static/swagger/favicon.png">
</head><body><div id="swagger-ui"></div>
<script src="/static/swagger/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body></html>
"""
"""The ``/docs`` page: Swagger UI drawing ``/openapi.json`` (the API's generated schema)."""
UPLOAD_OVERHEAD = 1 << 16


def error(status: int, message: str, headers=None, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message} if field is None else {"error": message, "field": field},
                        status_code=status, headers=headers)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk, a quota or a file-size limit (OSError ENOSPC / EDQUOT /
    EFBIG, SQLite's "database or disk is full"): :func:`retrieval.app.read_only.storage_cause`."""
    return storage_cause(exc) == "full"


def storage_answer(exc: BaseException, index_path) -> tuple[int, str] | None:
    """(status, one line) for an error that kept a write from the disk, naming the real cause; None for any other.

    507 a full disk (or quota, or file-size limit); 503 a read-only index (a read-only file system, or no
    permission: searches and pages work, changes are refused); 500 an I/O error of the disk. A write that fails
    this way changed nothing (:meth:`retrieval.app.folder.IndexFolder.publish`)."""
    cause = storage_cause(exc)
    if cause == "full":
        return 507, (f"no space left on device under {index_path} ({exc}); nothing was changed: free some space and "
                     f"try again.")
    if cause in ("read-only", "permission"):
        if isinstance(exc, IndexReadOnly):   # refused before anything was written: its line names the cause
            return 503, str(exc)
        why = "read-only file system" if cause == "read-only" else "permission denied"
        return 503, (f"the index is read-only ({why}; {exc}): searches and pages work, changes are refused; "
                     f"nothing was changed.")
    if cause == "io":
        return 500, f"the disk under {index_path} reported an I/O error ({exc}); nothing was changed."
    return None
def _validation_message(exc: RequestValidationError) -> str:
    errs = exc.errors()
    if not errs:
        return "invalid request."
    e = errs[0]
    if e.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({(e.get('ctx') or {}).get('error', 'decode error')})."
    if tuple(e.get("loc", ())) == ("body",) and e.get("type") in ("model_attributes_type", "dict_type"):
        return "the request body must be a JSON object."
    where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path", "form"))
    return f"{where or 'request'}: {e.get('msg', 'invalid value')}."


def create_app(service: Service, *, token: str | None = None, warm_up: bool = True, host: str = "127.0.0.1",
               allow_hosts=()) -> FastAPI:
    """The app serving ``service``, guarded by :class:`retrieval.web.guard.Guard`: ``token`` required on every
    request when set; ``host`` the address the server listens on and ``allow_hosts`` the other names it answers to
    (the ``Host`` allow-list)."""
    from retrieval.web import api, duplicates_api, pages

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if warm_up:
            service.pool.submit(service.warm_up)   # loads the model in the background; requests may start now
        yield
        service.close()

    app = FastAPI(title="retrieval", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Search an image index by image or by box; add and remove images. Errors are "
                              "`{\"error\": \"one line\"}` with a status code. Give the token, when the server has "
                              "one, as `Authorization: Bearer TOKEN`.")
    app.state.service = service

    app.state.refused_bodies, app.state.refused_writes = [], []   # what the guard refused (read by the tests)
    app.add_middleware(Guard, hosts=HostPolicy(host, allow_hosts), token=token,
                       max_body=service.max_upload_bytes + UPLOAD_OVERHEAD, refused_bodies=app.state.refused_bodies,
                       refused_writes=app.state.refused_writes)

    @app.exception_handler(ApiError)
    async def api_error(request, exc: ApiError):
        return error(exc.status, exc.message, field=exc.field)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request, exc: RequestValidationError):
        return error(400, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))   # 405: its Allow

    def storage_error(request, exc: Exception):
        answer = storage_answer(exc, service.path)
        if answer is not None:
            logger.error("%s %s: %s", request.method, request.url.path, answer[1])
            return error(*answer)
        logger.error("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        return error(500, f"storage error under {service.path} ({type(exc).__name__}: {exc}); the server log has "
                          f"the details.")

    # answered here (not re-raised to the server, which would close the connection before the client reads it)
    app.add_exception_handler(OSError, storage_error)
    app.add_exception_handler(sqlite3.Error, storage_error)

    @app.exception_handler(Exception)
    async def unexpected(request, exc: Exception):
        if storage_cause(exc) is not None:
            return storage_error(request, exc)
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error(500, f"internal error ({type(exc).__name__}); the server log has the details.")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str):
        if name not in STATIC_FILES:
            raise ApiError(404, f"no static file {name!r}.")
        data = resources.files("retrieval.web").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        """The icon (an SVG file, which browsers take under this name too)."""
        return static("favicon.svg")

    @app.get("/docs", include_in_schema=False)
    def docs():
        return HTMLResponse(DOCS_PAGE)

    @app.get("/static/swagger/{name}", include_in_schema=False)
    def swagger_static(name: str):
        if name not in SWAGGER_FILES:
            raise ApiError(404, f"no static file {name!r}.")
        data = resources.files("fastapi_offline").joinpath("static", name).read_bytes()
        return Response(data, media_type=SWAGGER_FILES[name],
                        headers={"Cache-Control": "max-age=86400"})

    app.include_router(api.router)
    app.include_router(duplicates_api.router, responses=api.ERROR_RESPONSES)   # its errors documented as api's
    app.include_router(pages.router)
    return app
