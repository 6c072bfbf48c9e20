"""A self-contained HTML gallery of a query and its results (opens from disk, without a server).

Thumbnails are inline JPEG data URIs; boxes are SVG rectangles laid over each thumbnail in the coordinates of the
original image (after EXIF orientation), so they stay right at any display size. The query and every result link
to their photo (:func:`file_href`: a percent-encoded path relative to the page's folder, so the page and the photos
can move together), and file names wrap only after a ``/`` (:func:`path_html`), never inside a name. A small
inline script records, on ``<body>``, how many thumbnails decoded (``data-images-loaded``) and how many boxes have
a non-empty rendered size (``data-boxes-drawn``); the browser test reads them.
"""

from __future__ import annotations

import base64
import html
import io
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from retrieval.core.persistence import atomic_write

GALLERY_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;background:#fafafa;color:#222}
h1{font-size:1.3em} .meta{color:#555;font-size:.9em}
.grid{display:flex;flex-wrap:wrap;gap:14px}
figure{margin:0;background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px;width:260px}
figure.query{border:2px solid #1565c0;width:340px}
.frame{position:relative;line-height:0}
.frame img{width:100%;height:auto;display:block}
.frame svg{position:absolute;left:0;top:0;width:100%;height:100%;overflow:visible;pointer-events:none}
a.photo{display:block;color:inherit}
a.file{color:#1565c0;text-decoration:none} a.file:hover{text-decoration:underline}
.seg{display:inline-block;max-width:100%;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;
vertical-align:bottom}
rect.box{fill:none;stroke:#e53935;stroke-width:3;vector-effect:non-scaling-stroke}
rect.qbox{stroke:#1e88e5}
figcaption{font-size:.8em;line-height:1.35;margin-top:6px}
.rank{font-weight:bold}
figure.verified{border-color:#2e7d32} span.verified{color:#2e7d32;font-weight:bold} .unverified{color:#777}
"""
"""The galleries' style sheet (this page and ``retrieval duplicates --html``). Names are never broken inside a
word: each path segment is one unbreakable ``.seg`` (cut with an ellipsis when wider than its figure; the link's
``title`` gives the whole path)."""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('img.thumb'), ok = 0;
  imgs.forEach(function (im) { if (im.complete && im.naturalWidth > 0) ok++; });
  var drawn = 0;
  document.querySelectorAll('rect.box').forEach(function (r) {
    var b = r.getBoundingClientRect(); if (b.width > 0 && b.height > 0) drawn++; });
  document.body.setAttribute('data-images-loaded', String(ok));
  document.body.setAttribute('data-boxes-drawn', String(drawn));
});
"""


def thumbnail_data_uri(path, max_side: int = 360, quality: int = 80) -> tuple[str, tuple[int, int]]:
    """A JPEG data URI of the image at ``path`` (any format :func:`retrieval.features.image.open_image` opens; EXIF
    orientation applied, longest side ``max_side``, display colours) and the original size ``(w, h)`` after
    orientation. Raises OSError or :class:`retrieval.features.image.ImageReadError` when it cannot be read."""
    from PIL import Image

    from retrieval.features.image import display_rgb, exif_orientation, open_image, peek_image

    with peek_image(path) as im:
        w, h = im.size
        size = (h, w) if exif_orientation(im) in (5, 6, 7, 8) else (w, h)
    rgb = display_rgb(open_image(path, draft=(max_side, max_side)))
    rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii"), size


def file_href(path, base_dir=None) -> str:
    """The ``href`` of a link from a page in ``base_dir`` to the file ``path``: its path relative to ``base_dir``
    (``/`` separated, percent-encoded: spaces, accents, ``#``, ``?``, ``*`` and ``%`` in names are safe), or a
    ``file://`` URI of its absolute path when ``base_dir`` is None or no relative path exists (another drive)."""
    target = os.path.abspath(os.fspath(path))
    if base_dir is not None:
        try:
            rel = os.path.relpath(target, os.path.abspath(os.fspath(base_dir)))
        except ValueError:   # another drive (Windows)
            rel = None
        if rel is not None:
            return urllib.parse.quote(rel.replace(os.sep, "/"), safe="/")
    return Path(target).as_uri()


def path_html(path) -> str:
    """A path as HTML whose lines break only after a ``/``: each segment an unbreakable ``<span class="seg">``,
    a ``<wbr>`` after each separator."""
    parts = str(path).replace(os.sep, "/").split("/")
    return "/<wbr>".join(f'<span class="seg">{html.escape(p)}</span>' if p else "" for p in parts)


def file_link(path, base_dir=None) -> str:
    """``<a class="file">``: the path (:func:`path_html`) linked to its file (:func:`file_href`), the whole path in
    its ``title``."""
    return (f'<a class="file" href="{html.escape(file_href(path, base_dir))}" '
            f'title="{html.escape(str(path))}">{path_html(path)}</a>')


def _figure(path, size_uri, box, caption_html: str, css_class: str, box_class: str, base_dir=None) -> str:
    uri, (w, h) = size_uri
    rect = ""
    if box is not None:
        x1, y1, x2, y2 = (float(v) for v in box)
        rect = (f'<rect class="box {box_class}" x="{x1:.1f}" y="{y1:.1f}" width="{max(x2 - x1, 1):.1f}" '
                f'height="{max(y2 - y1, 1):.1f}"/>')
    frame = (f'<div class="frame"><img class="thumb" src="{uri}" alt="{html.escape(Path(path).name)}">'
             f'<svg viewBox="0 0 {w} {h}" preserveAspectRatio="none">{rect}</svg></div>')
    return (f'<figure class="{css_class}"><a class="photo" href="{html.escape(file_href(path, base_dir))}">{frame}</a>'
            f"<figcaption>{caption_html}</figcaption></figure>")


def render_gallery(query_path, hits: Sequence, *, query_box=None, title: str = "retrieval results",
                   thumb_side: int = 360, base_dir=None) -> str:
    """The HTML text of a gallery.

    Parameters
    ----------
    query_path : str or Path — the query image
    hits : sequence of :class:`retrieval.engine.hits.Hit` (or objects with rank, path, score, inliers, box and
        optionally similarity, verified); each caption says whether the hit is verified, and a box (the matched
        region) is drawn only on a verified hit
    query_box : (x1, y1, x2, y2) or None — drawn on the query
    base_dir : str, Path or None — the folder the page is written to: links to the photos are relative to it
        (:func:`file_href`); None: absolute ``file://`` links
    """
    q_caption = f"<b>query</b><br>{file_link(query_path, base_dir)}"
    if query_box is not None:
        q_caption += "<br>box " + ", ".join(f"{float(v):.0f}" for v in query_box)
    parts = [_figure(query_path, thumbnail_data_uri(query_path, thumb_side), query_box, q_caption, "query",
                     "qbox", base_dir)]
    for hit in hits:
        verified = bool(getattr(hit, "verified", False))
        cap = f'<span class="rank">#{hit.rank}</span> score {hit.score:.4f}'
        similarity = getattr(hit, "similarity", None)
        if similarity is not None:
            cap += f" &middot; similarity {similarity:.4f}"
        if verified:
            cap += '<br><span class="verified">&#10003; verified</span>'
            if hit.inliers is not None:
                cap += f" &middot; {int(hit.inliers)} inliers"
        else:
            cap += '<br><span class="unverified">not verified</span>'
        cap += f"<br>{file_link(hit.path, base_dir)}"
        try:
            thumb = thumbnail_data_uri(hit.path, thumb_side)
        except (OSError, ValueError):   # ImageReadError is a ValueError
            thumb = ("data:image/gif;base64,R0lGODlhAQABAAAAACw=", (1, 1))
            cap += "<br><i>(file no longer readable)</i>"
        css = "result verified" if verified else "result"
        parts.append(_figure(hit.path, thumb, hit.box if verified else None, cap, css, "match", base_dir))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{GALLERY_CSS}</style></head>\n"
        f"<body data-results=\"{len(hits)}\"><h1>{html.escape(title)}</h1>"
        f"<p class=\"meta\">{len(hits)} results, {sum(bool(getattr(h, 'verified', False)) for h in hits)} "
        f"verified &middot; boxes: query region (blue) and matched regions of verified results (red)</p>"
        f"<div class=\"grid\">{''.join(parts)}</div><script>{_SCRIPT}</script></body></html>\n"
    )


def write_gallery(path, query_path, hits: Sequence, *, query_box=None, title: str = "retrieval results") -> Path:
    """Write :func:`render_gallery` to ``path`` atomically, its links relative to the folder of ``path``; returns
    the path."""
    path = Path(path)
    text = render_gallery(query_path, hits, query_box=query_box, title=title, base_dir=path.parent)
    with atomic_write(path, "w") as fh:
        fh.write(text)
    return path
