"""The HTML galleries (``retrieval query --html``, ``retrieval duplicates --html``): the query and every result link
to their file (relative, percent-encoded: spaces, accents, ``#``, ``?``, ``*``, ``%``), names break only after a
``/``, and verified results show their matched region."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from cli_world import run
from PIL import Image

from retrieval.app.duplicates.report_html import render_duplicates_html, write_duplicates_html
from retrieval.app.gallery import file_href, render_gallery, write_gallery
from retrieval.engine.hits import Hit

ODD_NAMES = ["été plage 1.jpg", "a#b?c*d.png", "100% sûr.jpg", "x&y <z>.heic", "plain.jpg"]


class Page(HTMLParser):
    """The figures of a gallery page: for each, its class, the hrefs of its links, its caption's text, the title
    of its file link and its boxes; and the page's style sheet."""

    def __init__(self, text: str):
        super().__init__()
        self.figures, self.css, self._in_style, self._fig, self._seg = [], "", False, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "style":
            self._in_style = True
        elif tag == "figure":
            self._fig = {"class": a.get("class", ""), "hrefs": [], "titles": [], "text": "", "boxes": 0,
                         "segments": [], "wbr_in_segment": False}
            self.figures.append(self._fig)
        elif self._fig is not None and tag == "a":
            self._fig["hrefs"].append(a["href"])
            if "title" in a:
                self._fig["titles"].append(a["title"])
        elif self._fig is not None and tag == "rect":
            self._fig["boxes"] += 1
        elif self._fig is not None and tag == "span" and a.get("class") == "seg":
            self._seg = ""
        elif tag == "wbr" and self._seg is not None:
            self._fig["wbr_in_segment"] = True

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False
        elif tag == "figure":
            self._fig = None
        elif tag == "span" and self._seg is not None:
            self._fig["segments"].append(self._seg)
            self._seg = None

    def handle_data(self, data):
        if self._in_style:
            self.css += data
        elif self._fig is not None:
            self._fig["text"] += data
            if self._seg is not None:
                self._seg += data


def resolve(href: str, page: Path) -> Path:
    """The file a link of ``page`` opens, as a browser resolves it."""
    parts = urlsplit(href)
    assert not parts.query and not parts.fragment, href   # '?' and '#' of names are encoded
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    assert parts.scheme == "" and not href.startswith("/"), href
    return Path(os.path.normpath(page.parent / unquote(href)))


def check_no_mid_word_breaks(css: str) -> None:
    compact = re.sub(r"\s+", "", css)
    for rule in ("word-break:break-all", "overflow-wrap:anywhere", "word-wrap:anywhere", "overflow-wrap:break-word",
                 "word-wrap:break-word", "word-break:break-word", "hyphens:auto", "line-break:anywhere"):
        assert rule not in compact, rule
    assert ".seg{" in compact and "white-space:nowrap" in compact


@pytest.fixture(scope="module")
def odd_photos(tmp_path_factory):
    """Photos under names a URL must encode, in a sub-folder with a space and an accent."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    d = tmp_path_factory.mktemp("odd")
    folder = d / "Vacances d'été" / "jour 2"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    paths = []
    for i, name in enumerate(ODD_NAMES):
        arr = (rng.random((120 + 10 * i, 160, 3)) * 255).astype(np.uint8)
        p = folder / name
        Image.fromarray(arr).save(p, quality=90)
        paths.append(p)
    return d, paths


def hits_for(paths):
    return [Hit(id=i, score=1.5 if i % 2 else 0.4, inliers=12 if i % 2 else None,
                box=(10.0, 20.0, 90.0, 80.0) if i % 2 else None, rank=i, path=str(p), similarity=0.5,
                verified=bool(i % 2)) for i, p in enumerate(paths[1:], start=1)]


def test_file_href_is_relative_and_percent_encoded(tmp_path):
    page_dir = tmp_path / "out"
    assert file_href(tmp_path / "photos" / "a#b?c*d.png", page_dir) == "../photos/a%23b%3Fc%2Ad.png"
    assert file_href(tmp_path / "out" / "été plage.jpg", page_dir) == "%C3%A9t%C3%A9%20plage.jpg"
    assert file_href(tmp_path / "100% sûr.jpg", page_dir) == "../100%25%20s%C3%BBr.jpg"
    assert file_href(tmp_path / "a b.jpg") == (tmp_path / "a b.jpg").as_uri()   # no page folder: file:// URI
    assert file_href("x:y.jpg", tmp_path).endswith("x%3Ay.jpg")   # never read as a URL scheme


@pytest.mark.parametrize("where", ["beside", "elsewhere"])
def test_every_figure_links_to_its_file(odd_photos, tmp_path, where):
    d, paths = odd_photos
    page = (paths[0].parent if where == "beside" else tmp_path / "pages" / "deep") / f"g-{where}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    hits = hits_for(paths)
    write_gallery(page, paths[0], hits, query_box=(5, 6, 100, 110))
    parsed = Page(page.read_text(encoding="utf-8"))
    figures = parsed.figures
    assert [f["class"] for f in figures][0] == "query" and len(figures) == 1 + len(hits)
    for fig, path in zip(figures, paths, strict=True):
        assert len(fig["hrefs"]) == 2, fig                         # the thumbnail and the name
        for href in fig["hrefs"]:
            assert not href.startswith("file:"), href            # relative: the page and photos move together
            target = resolve(href, page)
            assert target.is_file() and target.samefile(path), (href, target)
        assert fig["titles"] == [str(path)]
        assert "".join(fig["segments"]) == "".join(str(path).split("/"))   # the whole name, one piece per segment
        assert path.name in fig["segments"] and not fig["wbr_in_segment"]
    check_no_mid_word_breaks(parsed.css)
    # the query's box and the verified results' matched regions, none on the others
    assert [f["boxes"] for f in figures] == [1] + [1 if h.box is not None else 0 for h in hits]


def test_render_without_a_page_folder_gives_file_uris(odd_photos):
    _, paths = odd_photos
    parsed = Page(render_gallery(paths[0], hits_for(paths)))
    for fig, path in zip(parsed.figures, paths, strict=True):
        assert all(resolve(h, Path("/nowhere/x.html")).samefile(path) for h in fig["hrefs"])


def test_duplicates_page_links_and_regions(odd_photos, tmp_path):
    _, paths = odd_photos
    images = [{"id": i, "path": str(p), "width": 160, "height": 120 + 10 * i, "bytes": p.stat().st_size,
               "format": "JPEG", "keeper": i == 0} for i, p in enumerate(paths[:2])]
    pair = SimpleNamespace(a=0, b=1, regions=((10, 10, 80, 60), (20, 15, 90, 70)), inliers=25)
    scene = SimpleNamespace(kind="scene", group=1, images=images, pairs=[pair], keeper_path=str(paths[0]),
                            keeper_reason="largest resolution")
    near = SimpleNamespace(kind="near", group=2, images=[dict(im, id=im["id"] + 10) for im in images], pairs=[],
                           keeper_path=str(paths[0]), keeper_reason="largest resolution")
    page = tmp_path / "report" / "dups.html"
    page.parent.mkdir()
    write_duplicates_html(page, [scene, near])
    text = page.read_text(encoding="utf-8")
    parsed = Page(text)
    assert len(parsed.figures) == 4
    for fig, path in zip(parsed.figures, paths[:2] * 2, strict=True):
        assert len(fig["hrefs"]) == 2 and all(resolve(h, page).samefile(path) for h in fig["hrefs"])
        assert path.name in fig["segments"] and not fig["wbr_in_segment"]
    assert text.count('class="region"') == 2   # the matched region on both photos of the scene pair
    check_no_mid_word_breaks(parsed.css)
    assert render_duplicates_html([scene]).count('href="file://') == 4   # 2 photos, 2 links each


def test_cli_query_and_duplicates_pages_link_their_photos(cli_world, tmp_path):
    """``retrieval query --html`` and ``retrieval duplicates --html`` on the CLI's test index (its photos include
    "Müller copy.jpg", an exact copy under a name with a space and an accent), pages in another folder."""
    index = tmp_path / "idx"
    shutil.copytree(cli_world["index"], index)
    photos = cli_world["photos"]
    query = photos / "Müller copy.jpg"
    page = tmp_path / "out" / "query page.html"
    res = run(["query", query, "--index", index, "--rerank", "spatial", "--format", "json", "-k", "4",
               "--html", page])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    parsed = Page(page.read_text(encoding="utf-8"))
    assert len(parsed.figures) == 1 + len(hits)
    targets = [query] + [Path(h["path"]) for h in hits]
    for fig, path in zip(parsed.figures, targets, strict=True):
        assert fig["hrefs"] and all(resolve(h, page).samefile(path) for h in fig["hrefs"]), fig["hrefs"]
    assert [f["boxes"] for f in parsed.figures[1:]] == [int("box" in h) for h in hits]
    assert any("box" in h for h in hits)   # the exact copy is verified, its matched region drawn
    dpage = tmp_path / "out" / "dups.html"
    res = run(["duplicates", "--index", index, "--html", dpage, "-q"])
    assert res.exit_code == 0, res.output
    figures = Page(dpage.read_text(encoding="utf-8")).figures
    assert any(f["titles"] == [str(query)] for f in figures)
    for fig in figures:
        assert all(resolve(h, dpage).samefile(fig["titles"][0]) for h in fig["hrefs"])
