"""The HTML pages (Jinja2 templates in ``retrieval/web/templates``, a little plain JavaScript in ``static/app.js``):

- ``/``: the grid of the indexed photos: the folder tree (``?folder=``: one folder's photos and its sub-folders,
  with breadcrumbs; :mod:`retrieval.web.folders`), a filter by path that ignores case and accents (``?q=``: in
  the open folder and its sub-folders; narrowed as one types), paging by keyset (``after`` / ``before``: the opaque
  cursors of ``GET /api/images``), a link to the duplicates; each tile shows the photo's folder and name;
- ``/query``: pick an indexed photo (``?id=``: with its information panel and links to open or download its
  original) or upload one, draw a box with the mouse (drag to draw, drag inside to move, "Clear" to remove),
  search; results with the matched box drawn on each verified hit; a result opens the match view over the page;
- ``/match?a=ID&b=ID[&box=x1,y1,x2,y2]``: the side-by-side match view with the inlier correspondences, the
  query box and the matched outline each drawn inside its own photo (the query page opens the same view in place,
  and shows this address while it is open for an indexed query);
- ``/duplicates``: the duplicate groups (exact copies, near duplicates, same scene; the keeper marked, the matched
  region drawn on same-scene photos), the actions on the extra copies (each a dry run shown for confirmation first,
  then undoable), and "Already have these?" (uploaded photos checked against the index, not added). Drawn by
  ``static/duplicates.js`` from ``/api/duplicates...`` (the groups may take a while to compute).

Keys (``static/app.js``): on the grid and the results, ``j`` / ``→`` and ``k`` / ``←`` move to the next / previous
photo, ``Enter`` opens it; in the match view they show the next / previous result's match, and ``Esc`` closes
it; ``/`` puts the cursor in the filter.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from retrieval.core.units import human_bytes
from retrieval.web.api import parse_box_field, service_of
from retrieval.web.folders import parents_of

router = APIRouter(include_in_schema=False)

PER_PAGE = 48


_env = Environment(loader=PackageLoader("retrieval.web", "templates"), autoescape=select_autoescape(default=True))


_env.filters["human_bytes"] = human_bytes


def render(name: str, **context) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context))


@router.get("/", response_class=HTMLResponse)
def grid(request: Request, after: str | None = None, before: str | None = None, q: str = "", folder: str = ""):
    svc = service_of(request)
    data = svc.images(after=after or None, before=before or None, limit=PER_PAGE, q=q or None,
                      folder=folder or None)
    index = svc.folders.current()
    current = index.folder(folder) if folder else None
    subfolders = [index.folders_by_path[c] for c in current.children] if current else index.top()
    return render("grid.html", title=current.name if current else "Photos", data=data, q=q, folder=folder,
                  crumbs=parents_of(folder) if folder else [], tree=index, subfolders=subfolders,
                  folder_of=lambda i: index.folder_of_id(i) or "", open_folders=set(parents_of(folder)) if folder else set())


@router.get("/query", response_class=HTMLResponse)
def query(request: Request, id: int | None = None):
    svc = service_of(request)
    image = svc.image(id) if id is not None else None
    facts = svc.facts(id) if image is not None and image["status"] == "indexed" else None
    return render("query.html", title=facts["name"] if facts else "Search", image=image, facts=facts)


@router.get("/match", response_class=HTMLResponse)
def match(request: Request, a: int, b: int, box: str | None = None):
    svc = service_of(request)
    parse_box_field(box)
    return render("match.html", title="Match", a=svc.image(a), b=svc.image(b), box=box or "")


@router.get("/duplicates", response_class=HTMLResponse)
def duplicates(request: Request):
    catalog = service_of(request).local().catalog
    return render("duplicates.html", title="Duplicates", indexed=catalog.count("indexed"))
