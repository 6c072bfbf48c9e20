"""The HTML pages (Jinja2 templates in ``retrieval/web/templates``, a little plain JavaScript in ``static/app.js``):

- ``/``: the grid of the indexed photos, a filter by path, and paging by keyset (``after`` / ``before``: the
  opaque cursors of ``GET /api/images``);
- ``/query``: pick an indexed photo (``?id=``) or upload one, draw a box with the mouse (drag to draw, drag inside
  to move, "Clear" to remove), search; results with the matched box drawn on each verified hit;
- ``/match?a=ID&b=ID[&box=x1,y1,x2,y2]``: the side-by-side match view with the inlier correspondences (the query
  page opens the same view in place for an uploaded query);
- ``/duplicates``: the duplicate groups (exact copies, near duplicates, same scene; the keeper marked, the matched
  region drawn on same-scene photos), the actions on the extra copies (each a dry run shown for confirmation first,
  then undoable), and "Already have these?" (uploaded photos checked against the index, not added). Drawn by
  ``static/duplicates.js`` from ``/api/duplicates...`` (the groups may take a while to compute).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from retrieval.web.api import parse_box_field, service_of

router = APIRouter(include_in_schema=False)

PER_PAGE = 48


_env = Environment(loader=PackageLoader("retrieval.web", "templates"), autoescape=select_autoescape(default=True))


def render(name: str, **context) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context))


@router.get("/", response_class=HTMLResponse)
def grid(request: Request, after: str | None = None, before: str | None = None, q: str = ""):
    svc = service_of(request)
    data = svc.images(after=after or None, before=before or None, limit=PER_PAGE, q=q or None)
    return render("grid.html", title="Photos", data=data, q=q)


@router.get("/query", response_class=HTMLResponse)
def query(request: Request, id: int | None = None):
    svc = service_of(request)
    image = svc.image(id) if id is not None else None
    return render("query.html", title="Search", image=image)


@router.get("/match", response_class=HTMLResponse)
def match(request: Request, a: int, b: int, box: str | None = None):
    svc = service_of(request)
    parse_box_field(box)
    return render("match.html", title="Match", a=svc.image(a), b=svc.image(b), box=box or "")


@router.get("/duplicates", response_class=HTMLResponse)
def duplicates(request: Request):
    catalog = service_of(request).local().catalog
    return render("duplicates.html", title="Duplicates", indexed=catalog.count("indexed"))
