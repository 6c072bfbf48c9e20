"""The ASGI app of ``retrieval serve``: :func:`create_app` (FastAPI; the OpenAPI page is ``/docs``).

Token: when the server has one, every request (pages, API, static files, ``/docs``) must carry it, as
``Authorization: Bearer TOKEN``, as ``?token=TOKEN`` in the URL, or as the ``retrieval_token`` cookie that a page
opened with ``?token=`` sets (HttpOnly, SameSite=Strict), so a browser needs the token in the first URL only. It is
compared with :func:`hmac.compare_digest`. A request without it gets 401.

Errors are ``{"error": "one line"}`` with the status code (400 bad input, 401 token, 404 unknown id, 413 too large,
415 not an image, 409 conflict with the index's state, 503 index being built); never a traceback (an unexpected error
is logged by the server and answered 500 with its type).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from retrieval._version import __version__
from retrieval.web.service import Service
from retrieval.web.uploads import ApiError

logger = logging.getLogger(__name__)

TOKEN_COOKIE = "retrieval_token"
STATIC_FILES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
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
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
                         presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout"});</script>
</body></html>
"""
"""The ``/docs`` page: Swagger UI drawing ``/openapi.json`` (the API's generated schema)."""
UPLOAD_OVERHEAD = 1 << 16


def error(status: int, message: str, headers=None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _given_token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE)


def _validation_message(exc: RequestValidationError) -> str:
    errs = exc.errors()
    if not errs:
        return "invalid request."
    e = errs[0]
    where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path", "form"))
    return f"{where or 'request'}: {e.get('msg', 'invalid value')}."


def create_app(service: Service, *, token: str | None = None, warm_up: bool = True) -> FastAPI:
    """The app serving ``service``; ``token``: required on every request when set."""
    from retrieval.web import api, pages

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
    expected = token.encode("utf-8") if token else None

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if expected is not None:
            given = _given_token(request)
            if not given or not hmac.compare_digest(given.encode("utf-8"), expected):
                return error(401, "missing or wrong token: send 'Authorization: Bearer TOKEN' (or open the page "
                                  "with ?token=TOKEN).", headers={"WWW-Authenticate": "Bearer"})
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > service.max_upload_bytes + UPLOAD_OVERHEAD:
            return error(413, f"request body of {int(length) / 1e6:.1f} MB is larger than the upload limit of "
                              f"{service.max_upload_bytes / 1e6:g} MB (--max-upload-mb).")
        response = await call_next(request)
        if expected is not None and request.query_params.get("token") and not request.cookies.get(TOKEN_COOKIE):
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.exception_handler(ApiError)
    async def api_error(request, exc: ApiError):
        return error(exc.status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request, exc: RequestValidationError):
        return error(400, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request, exc: Exception):
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error(500, f"internal error ({type(exc).__name__}); the server log has the details.")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str):
        if name not in STATIC_FILES:
            raise ApiError(404, f"no static file {name!r}.")
        data = resources.files("retrieval.web").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})

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
    app.include_router(pages.router)
    return app
