"""``retrieval duplicates --html``: a self-contained page of the groups, each with its kind, the suggested keeper
marked, every photo's resolution, file size, format, date and camera, and on same-scene pairs the matched region
(the bounding box of the verified inliers) drawn over both photos. Each photo links to its file (relative to the
page's folder, :func:`retrieval.app.gallery.file_href`); names wrap only after a ``/``."""

from __future__ import annotations

import html
from pathlib import Path

LABELS = {"exact": "exact copies (same bytes or pixels)",
          "formats": "the same photograph in two formats (a camera's RAW file and its JPEG: kept together, never "
                     "removed unless named)",
          "near": "near duplicates (the same photograph: resized, re-encoded, cropped, turned or retouched)",
          "scene": "same scene or object (different photographs: never removed unless named)"}

_EXTRA_CSS = """
h2{font-size:1em;margin:1.2em 0 .4em}
section[data-kind=exact] h2{color:#0a5}
section[data-kind=formats] h2{color:#555}
section[data-kind=near] h2{color:#a60}
section[data-kind=scene] h2{color:#36c}
.frame{position:relative;display:inline-block}
.region{position:absolute;border:2px solid #36c;box-sizing:border-box;pointer-events:none}
figure.keeper{outline:3px solid #0a5}
.badge{background:#0a5;color:#fff;border-radius:3px;padding:0 .3em;font-size:.8em}
"""


def _size(n) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


def _regions_of(group) -> dict:
    """``{id: (x0, y0, x1, y1)}``: one matched region per photo of a scene group (its first pair)."""
    out: dict = {}
    for p in group.pairs:
        if p.regions is None:
            continue
        for i, r in zip((p.a, p.b), p.regions, strict=True):
            out.setdefault(i, r)
    return out


def render_duplicates_html(groups: list, *, title: str = "duplicates", thumb_side: int = 240,
                           base_dir=None) -> str:
    """The page (module docstring) for :class:`retrieval.app.duplicates.DuplicateGroup` s; ``base_dir``: the folder
    the page is written to (links relative to it; None: absolute ``file://`` links)."""
    from retrieval.app.gallery import GALLERY_CSS, file_href, file_link, thumbnail_data_uri

    parts = []
    for g in groups:
        regions = _regions_of(g) if g.kind == "scene" else {}
        figs = []
        for im in g.images:
            try:
                uri, _ = thumbnail_data_uri(im["path"], thumb_side)
            except (OSError, ValueError):   # ImageReadError is a ValueError
                uri = "data:image/gif;base64,R0lGODlhAQABAAAAACw="
            box = ""
            r, w, h = regions.get(im["id"]), im.get("width"), im.get("height")
            if r is not None and w and h:
                x0, y0, x1, y1 = r
                box = (f'<div class="region" style="left:{100 * x0 / w:.1f}%;top:{100 * y0 / h:.1f}%;'
                       f'width:{100 * (x1 - x0) / w:.1f}%;height:{100 * (y1 - y0) / h:.1f}%"></div>')
            keeper = im.get("keeper")
            facts = " &middot; ".join(html.escape(str(v)) for v in (
                f"{im['width']}x{im['height']}" if im.get("width") else None, _size(im.get("bytes")),
                im.get("format"), im.get("date") or (f"modified {im['mtime']}" if im.get("mtime") else None),
                im.get("camera")) if v)
            badge = '<span class="badge">keep</span> ' if keeper else \
                '<span class="badge">hard link of the keeper</span> ' if im.get("hard_link") else ""
            figs.append(f'<figure class="result{" keeper" if keeper else ""}" data-id="{im["id"]}">'
                        f'<a class="photo" href="{html.escape(file_href(im["path"], base_dir))}">'
                        f'<div class="frame"><img class="thumb" src="{uri}" '
                        f'alt="{html.escape(im["path"].rsplit("/", 1)[-1])}">{box}</div></a><figcaption>'
                        f'{badge}<span class="rank">id {im["id"]}</span> &middot; {facts}<br>'
                        f'{file_link(im["path"], base_dir)}</figcaption></figure>')
        inl = [p.inliers for p in g.pairs if p.inliers is not None]
        extra = f" &middot; {min(inl)}-{max(inl)} verified inliers" if inl else ""
        parts.append(f'<section class="group" data-kind="{g.kind}" data-group="{g.group}"><h2>group {g.group}: '
                     f'{len(g.images)} photos, {LABELS[g.kind]}{extra}; keep '
                     f'{html.escape(g.keeper_path.rsplit("/", 1)[-1])} ({html.escape(g.keeper_reason)})</h2>'
                     f'<div class="grid">{"".join(figs)}</div></section>')
    n_photos = sum(len(g.images) for g in groups)
    counts = {k: sum(g.kind == k for g in groups) for k in LABELS}
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{GALLERY_CSS}{_EXTRA_CSS}</style>"
            f"</head>\n<body data-groups=\"{len(groups)}\"><h1>{html.escape(title)}</h1>"
            f"<p class=\"meta\">{len(groups)} groups ({counts['exact']} exact, "
            + (f"{counts['formats']} in two formats, " if counts["formats"] else "")
            + f"{counts['near']} near, "
            f"{counts['scene']} same scene), {n_photos} photos</p>{''.join(parts)}</body></html>\n")


def write_duplicates_html(path, groups: list, *, title: str = "duplicates") -> Path:
    """Write :func:`render_duplicates_html` to ``path`` atomically, its links relative to the folder of ``path``;
    returns the path."""
    from retrieval.core.persistence import atomic_write

    path = Path(path)
    text = render_duplicates_html(groups, title=title, base_dir=path.parent)
    with atomic_write(path, "w") as fh:
        fh.write(text)
    return path
