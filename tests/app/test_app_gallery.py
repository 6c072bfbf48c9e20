"""Application: the self-contained HTML gallery, checked as text and in a real headless browser.

The browser test runs Debian's Chromium through its command line (``--dump-dom`` after the page's load
handler ran) and is skipped, with the reason, when no Chromium/Chrome binary is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from retrieval.app.gallery import render_gallery, write_gallery
from retrieval.engine.hits import Hit


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("gal")
    rng = np.random.default_rng(0)
    paths = []
    for i, (w, h) in enumerate([(320, 240), (200, 300), (400, 200), (256, 256), (300, 220)]):
        arr = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        p = d / f"im{i}.{'png' if i % 2 else 'jpg'}"
        Image.fromarray(arr).save(p)
        paths.append(p)
    return d, paths


def make_hits(paths):
    hits = []
    for r, p in enumerate(paths[1:], start=1):
        box = (10.0, 20.0, 110.0, 90.0) if r % 2 else None
        hits.append(Hit(id=r, score=1.0 / r, inliers=30 // r if box else None, box=box, rank=r, path=str(p),
                        similarity=0.5 / r, verified=box is not None))
    return hits


def test_gallery_is_self_contained_and_places_boxes(images):
    _, paths = images
    hits = make_hits(paths)
    text = render_gallery(paths[0], hits, query_box=(5, 6, 100, 120))
    assert "http://" not in text and "https://" not in text and "src=\"file" not in text
    assert text.count('class="thumb" src="data:image/jpeg;base64,') == 1 + len(hits)
    assert text.count('<figure class="result') == len(hits)
    assert text.count('<figure class="result verified">') == sum(h.verified for h in hits) == 2
    assert text.count("&#10003; verified") == 2 and text.count("not verified") == len(hits) - 2
    # one query box and one box per verified hit, in original-image coordinates
    assert text.count('class="box qbox"') == 1
    assert text.count('class="box match"') == sum(h.box is not None for h in hits)
    assert 'viewBox="0 0 200 300"' in text  # the second image's own size
    assert '<rect class="box match" x="10.0" y="20.0" width="100.0" height="70.0"/>' in text


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_gallery_in_headless_chromium(images, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium/Chrome binary on PATH (install Debian's 'chromium' to run this browser test)")
    _, paths = images
    hits = make_hits(paths)
    out = write_gallery(tmp_path / "g.html", paths[0], hits, query_box=(5, 6, 100, 120))
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
           "--virtual-time-budget=5000", "--dump-dom", out.resolve().as_uri()]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("headless Chromium did not finish within 90 s")
    dom = res.stdout
    assert "<body" in dom, res.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom).group(1)
    loaded = int(re.search(r'data-images-loaded="(\d+)"', body).group(1))
    drawn = int(re.search(r'data-boxes-drawn="(\d+)"', body).group(1))
    assert loaded == 1 + len(hits)  # query + K results decoded
    assert dom.count('<figure class="result') == len(hits)
    assert drawn == 1 + sum(h.box is not None for h in hits)  # every box has a non-empty rendered size


def test_gallery_never_draws_a_box_on_an_unverified_hit(images):
    _, paths = images
    hits = [Hit(id=1, score=0.4, box=(10.0, 20.0, 110.0, 90.0), rank=1, path=str(paths[1]), similarity=0.4),
            Hit(id=2, score=1.5, inliers=10, box=(1.0, 2.0, 50.0, 60.0), rank=2, path=str(paths[2]),
                similarity=0.3, verified=True)]
    text = render_gallery(paths[0], hits)
    assert text.count('class="box match"') == 1 and 'x="1.0" y="2.0"' in text and 'x="10.0" y="20.0"' not in text
    assert "2 results, 1 verified" in text
