"""The JSON API (``/api/...``; the OpenAPI page ``/docs`` documents it). Hits have the schema of
``retrieval query --json`` (:meth:`retrieval.engine.hits.Hit.to_json`).

Photos are named by their catalog id only: no route takes a path. The routes that send a photo's pixels (the
original, the thumbnails) answer only the server's own pages, scripts and typed URLs: a request a browser sends for
a page of another site (``Sec-Fetch-Site`` other than ``same-origin`` / ``none``) is refused (403).
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field

from retrieval.engine.params import ParamError, SearchParams
from retrieval.features import parse_box
from retrieval.web.originals import content_disposition
from retrieval.web.service import MAX_K, Service
from retrieval.web.uploads import INCOMING, ApiError, discard, field_error, receive

MAX_ROWS = 2**63 - 1
"""The largest row count there can be (SQLite's largest integer): a larger ``offset`` is refused (400) rather than
reaching the catalog (OverflowError). An id past it is simply not found (404, the catalog's answer)."""


class ErrorBody(BaseModel):
    """Every error of the API: one line, and the request's field refused when one is."""

    error: str = Field(description="what went wrong, in one line")
    field: str | None = Field(None, description="the request field refused, when one is")


ERROR_RESPONSES = {
    "4XX": {"model": ErrorBody, "description": "Refused: 400 bad input, 401 token missing or wrong, 403 cross-site "
                                               "write, 404 unknown id, 405 method, 409 conflict with the index's "
                                               "state, 413 too large, 415 not an image, 421 foreign Host"},
    503: {"model": ErrorBody, "description": "The index is being built by a running 'retrieval index', or is "
                                             "read-only (changes refused)"},
    507: {"model": ErrorBody, "description": "No space left on the device of the index; nothing was changed"},
}
"""The error answers every route may give (documented in the OpenAPI schema; a 5xx other than these is a bug)."""

router = APIRouter(prefix="/api", tags=["api"], responses=ERROR_RESPONSES)

BOX_HELP = "x1,y1,x2,y2 in pixels of the original image after EXIF rotation"


def service_of(request: Request) -> Service:
    return request.app.state.service


async def run(executor, fn, *args, **kwargs):
    """Run ``fn`` in ``executor`` (the search pool or the writer thread) without blocking the event loop."""
    return await asyncio.wrap_future(executor.submit(fn, *args, **kwargs))


def own_pages_only(request: Request, what: str) -> None:
    """ApiError 403 when a browser asks for ``what`` for a page of another site (module docstring)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ("same-origin", "none"):
        raise ApiError(403, f"{what} is only shown on this server's own pages (Sec-Fetch-Site: {site[:40]}).")


def search_params(**fields) -> SearchParams:
    """The request's :class:`~retrieval.engine.params.SearchParams`, built once from its fields (named as the
    value's); a refused value is a 400 naming its field (:func:`retrieval.web.uploads.field_error`)."""
    try:
        return SearchParams.of(**fields)
    except ParamError as exc:
        raise field_error(exc) from None


def parse_box_field(box: str | None):
    if box is None or not box.strip():
        return None
    try:
        return parse_box(box)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


async def checked_upload(svc: Service, upload: UploadFile, folder):
    """Receive and decode an upload (ApiError 413 / 415 / 400); returns the checked image in a temporary file (in
    ``svc.in_flight`` until the caller calls :func:`done_with`)."""
    tmp = await receive(upload, folder, svc.max_upload_bytes, svc.in_flight)
    try:
        return await run(svc.pool, svc.check_upload, tmp, upload.filename or "upload")
    except BaseException:
        done_with(svc, tmp)
        raise


def done_with(svc: Service, path) -> None:
    """Remove a received upload's temporary file (when it is still there) and forget it."""
    discard(path)
    svc.in_flight.discard(str(path))


@router.post("/search", summary="Search by an uploaded image or an indexed image's id, optionally in a box")
async def search(request: Request,
                 image: Annotated[UploadFile | None, File(description="an image file (not stored)")] = None,
                 id: Annotated[int | None, Form(description="id of an indexed image")] = None,
                 box: Annotated[str | None, Form(description=BOX_HELP)] = None,
                 k: Annotated[int, Form(le=MAX_K, description="number of results (1 to 200)",
                                        json_schema_extra={"minimum": 1})] = 10,
                 rerank: Annotated[str | None, Form(description="none or spatial (default: the preset's)")] = None,
                 min_similarity: Annotated[float | None, Form(
                     description="of the k best, only the hits verified or of at least this similarity (0 to 1)",
                     json_schema_extra={"minimum": 0, "maximum": 1})] = None,
                 verified_only: Annotated[bool, Form(description="of the k best, only the verified hits (needs "
                                                                 "spatial re-ranking)")] = False):
    """Ranked results: `{generation, query, seconds, hits: [{id, rank, path, score, inliers?, box?, similarity,
    verified, distance?}], sizes: {id: [width, height]}, folders: {id: folder}}` (a hit's folder as GET
    /api/folders names it); a verified hit's `box` is the matched region in its
    image. Give exactly one of `image` and `id`."""
    svc = service_of(request)
    if (image is None) == (id is None):
        raise ApiError(400, "give either an uploaded 'image' or the 'id' of an indexed image (not both).")
    bbox = parse_box_field(box)
    params = search_params(k=k, rerank=rerank or None, min_similarity=min_similarity, verified_only=verified_only)
    if image is None:
        return await run(svc.pool, svc.search, params, image_id=id, box=bbox)
    checked = await checked_upload(svc, image, tempfile.gettempdir())
    try:
        return await run(svc.pool, svc.search, params, image_path=checked.path, box=bbox)
    finally:
        done_with(svc, checked.path)


@router.get("/images", summary="A page of the indexed images")
def images(request: Request,
           after: Annotated[str | None, Query(description="the 'next' cursor of the previous page")] = None,
           before: Annotated[str | None, Query(description="the 'prev' cursor of the following page")] = None,
           offset: Annotated[int | None, Query(ge=0, le=MAX_ROWS,
                                               description="rows to skip (instead of a cursor)")] = None,
           limit: Annotated[int, Query(ge=1, le=1000)] = 60,
           q: Annotated[str | None, Query(description="only paths containing this (case- and accent-insensitive: "
                                                      "ete finds été)")] = None,
           folder: Annotated[str | None, Query(description="only the photos of this folder (a 'path' of GET "
                                                           "/api/folders); with q, of its sub-folders too")] = None):
    """`{generation, total, limit, q, folder, next, prev, offset?, images: [{id, path, width, height, n_features,
    status, hash, size, uploaded}]}`, ordered by id. Page with the opaque cursors: `next` (null on the last page) as
    `after`, `prev` (null on the first page) as `before`; a page asked by cursor never repeats nor skips an image
    when images are added or removed meanwhile, and costs the same wherever it is. `offset` still works (it
    costs more the further it goes)."""
    # an empty cursor is no cursor (as a form would send it)
    return service_of(request).images(after=after or None, before=before or None, offset=offset, limit=limit, q=q,
                                      folder=folder)


@router.get("/folders", summary="The folders of the indexed photos")
def folders(request: Request):
    """`{generation, folders: [{path, name, parent, photos, total, children}]}`, parents before their children:
    `path` is the folder's name relative to the folder the index follows that holds it, starting with that
    folder's own name (`Pictures/été`); `photos` are in the folder itself, `total` in it and its sub-folders."""
    index = service_of(request).folders.current()
    out = []

    def walk(folder):
        out.append(folder.to_json())
        for child in folder.children:
            walk(index.folders_by_path[child])

    for top in index.top():
        walk(top)
    return {"generation": index.generation, "folders": out}


@router.get("/images/{image_id}", summary="One image of the catalog")
def image(request: Request, image_id: int):
    return service_of(request).image(image_id)


@router.get("/images/{image_id}/facts", summary="What the information panel shows about a photo")
def facts(request: Request, image_id: int):
    """`{id, path, name, folder, width, height, megapixels, bytes, format, content_type, date, camera, modified,
    orientation, orientation_text, n_features, hash, error}`: width and height after the EXIF orientation (the
    index applies it), the date the photo was taken and the camera from its EXIF header (null when absent), the
    features the index keeps for it."""
    return service_of(request).facts(image_id)


@router.get("/images/{image_id}/original", summary="The original file of a photo, as it is",
            response_class=FileResponse,
            responses={200: {"description": "the file", "content": {"image/*": {}, "application/octet-stream": {}}}})
def original(request: Request, image_id: int,
             download: Annotated[bool, Query(description="true: as an attachment (a download); false: "
                                                              "shown in the browser")] = False):
    """The file of the catalog row `image_id`, byte for byte, with its content type (`image/heic` for a HEIC
    photo) and its file name (`Content-Disposition`, with `filename*` for a name that is not plain ASCII).
    The only parameter is `download`: a photo is never chosen by a path."""
    unknown = sorted(set(request.query_params) - {"download", "token"})
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r}: a photo is chosen by its id in the URL only "
                            f"(parameters: download).")
    own_pages_only(request, f"the original of image {image_id}")
    path, name, ctype = service_of(request).original(image_id)
    return FileResponse(path, media_type=ctype, headers={
        "Content-Disposition": content_disposition(name, attachment=download),
        "Cache-Control": "private, no-cache"})


@router.get("/images/{image_id}/thumbnail", summary="A JPEG thumbnail (EXIF orientation applied)",
            response_class=FileResponse, responses={200: {"description": "a JPEG file", "content": {"image/jpeg": {}}}})
def thumbnail(request: Request, image_id: int,
              size: Annotated[str, Query(description="small (320 px) or large (1024 px)",
                                         json_schema_extra={"enum": ["small", "large"]})] = "small"):
    own_pages_only(request, f"the thumbnail of image {image_id}")
    path = service_of(request).thumbnail(image_id, size)
    return FileResponse(path, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


@router.post("/images", status_code=201, summary="Add an uploaded image to the index")
async def add_image(request: Request, image: Annotated[UploadFile, File(description="an image file")]):
    """Decoded and checked first, then stored under the index's `uploads/` folder with the upload's own file name
    (its last part; ` (2)` before the extension when the name is taken) and indexed (a new generation;
    searches keep reading the previous one meanwhile). 201 with the new record, or 200 when the same content is
    already indexed; 409 while another `retrieval index` is writing."""
    svc = service_of(request)
    checked = await checked_upload(svc, image, svc.uploads / INCOMING)
    try:
        record, added = await run(svc.writer, svc.add, checked, image.filename or "upload")
    finally:
        done_with(svc, checked.path)
    return JSONResponse({"image": record, "added": added}, status_code=201 if added else 200)


@router.delete("/images/{image_id}", summary="Remove an image from the index")
async def delete_image(request: Request, image_id: int):
    """A new generation without the image; the file itself is kept, except an uploaded image's stored copy."""
    svc = service_of(request)
    return await run(svc.writer, svc.remove, image_id)


@router.get("/info", summary="The index: preset, model, counts, generation, last run")
def info(request: Request):
    return service_of(request).info()


@router.post("/match", summary="The verified correspondences between a query and an indexed image")
async def match(request: Request,
                b_id: Annotated[int, Form(description="id of the indexed result image")],
                a_id: Annotated[int | None, Form(description="id of the indexed query image")] = None,
                a_image: Annotated[UploadFile | None, File(description="or the query image file")] = None,
                box: Annotated[str | None, Form(description="the query box, " + BOX_HELP)] = None):
    """`{verified, reason, n_features, tentative, inliers, homography (query -> result), a: {id, size, box},
    b: {id, path, size}, points_a, points_b (inliers, at most 300), box_in_b (the query box's corners in b)}`."""
    svc = service_of(request)
    if (a_image is None) == (a_id is None):
        raise ApiError(400, "give either an uploaded 'a_image' or the 'a_id' of an indexed image (not both).")
    bbox = parse_box_field(box)
    if a_image is None:
        return await run(svc.pool, svc.match, a_id=a_id, b_id=b_id, box=bbox)
    checked = await checked_upload(svc, a_image, tempfile.gettempdir())
    try:
        return await run(svc.pool, svc.match, a_path=checked.path, b_id=b_id, box=bbox)
    finally:
        done_with(svc, checked.path)
