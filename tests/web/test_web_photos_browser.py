"""The photos page in a real headless browser (Debian's chromium + chromium-driver through Selenium), on a
photographer's folder (tests/web/photo_world.py: sub-folders, accented names, a star and spaces, a HEIC photo):
folders and breadcrumbs, the filter with and without accents, an original opened by the page's link, the HEIC
thumbnail, a HEIC upload found by its own name, the match view's drawings inside their photos, the keys.

It saves the README's screenshots (web-grid.png, web-query.png, web-match.png) in the folder named by
``$RETRIEVAL_SCREENSHOTS`` (``RETRIEVAL_SCREENSHOTS=docs/images`` refreshes the README's), else in a temporary
folder."""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path

import httpx
import pytest
from helpers import copy_index
from photo_world import (  # noqa: F401
    EXIF_MODEL,
    EXIF_PHOTO,
    HEIC_PHOTO,
    LAYOUT,
    QUERY,
    RESULT,
    heic_bytes,
    photo_world,
)
from web_support import BOX_IN_SCENE, ServerThread, browser_session, drag_box

from retrieval.web.folders import fold

FETCH_BYTES = """
var done = arguments[arguments.length - 1];
fetch(arguments[0], {credentials: "same-origin"}).then(function (r) {
  return r.arrayBuffer().then(function (buf) {
    var bytes = new Uint8Array(buf), parts = [];
    for (var i = 0; i < bytes.length; i += 8192) {
      parts.push(String.fromCharCode.apply(null, bytes.subarray(i, i + 8192)));
    }
    done({status: r.status, type: r.headers.get("content-type"), disposition: r.headers.get("content-disposition"),
          b64: btoa(parts.join(""))});
  });
}).catch(function (e) { done({error: String(e)}); });
"""

RECT = "var b = arguments[0].getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom];"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from browser_session(tmp_path_factory)


@pytest.fixture(scope="module")
def server(photo_world, tmp_path_factory):  # noqa: F811
    index = copy_index(photo_world["index"], tmp_path_factory.mktemp("photos-browser") / "index")
    server = ServerThread(index)
    yield server
    server.stop()


def save_screenshot(driver, name: str, folder: Path) -> Path:
    """The window as a palette PNG scaled by 0.75 (about 200 kB; the README's screenshots)."""
    from PIL import Image

    im = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    im = im.resize((round(im.width * 0.75), round(im.height * 0.75)), Image.Resampling.LANCZOS)
    out = folder / name
    im.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return out


def shown_tiles(d) -> dict:
    """{file name: folder} of the tiles on the page (read at once: the filter replaces them as one types)."""
    return d.execute_script("""
        var out = {};
        document.querySelectorAll('#grid a.tile').forEach(function (t) {
          out[t.querySelector('.name').textContent] = t.querySelector('.folder').textContent;
        });
        return out;""")


def test_a_photographer_browses_filters_opens_uploads_and_matches(photo_world, server, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("RETRIEVAL_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    d, world = browser, photo_world
    d.set_window_size(1280, 900)
    d.set_script_timeout(60)
    wait = WebDriverWait(d, 60)
    prefix = fold(str(world["photos"]))

    def loaded(img):
        return d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)

    # ------------------------------------------------------------------ folders: the tree, the cards, breadcrumbs
    d.get(server.url + "/")
    assert len(shown_tiles(d)) == len(LAYOUT) and d.find_element(By.ID, "duplicates-link").get_attribute("href") \
        .endswith("/duplicates")
    d.execute_script("window.scrollTo(0, document.body.scrollHeight)")
    wait.until(lambda _: all(loaded(i) for i in d.find_elements(By.CSS_SELECTOR, "#grid .tile img")))
    heic_tile = d.find_element(By.CSS_SELECTOR, f'#grid a.tile[data-path$="{Path(HEIC_PHOTO).name}"] img')
    assert loaded(heic_tile) and d.execute_script("return arguments[0].naturalWidth", heic_tile) > 100   # HEIC drawn
    d.execute_script("window.scrollTo(0, 0)")
    save_screenshot(d, "web-grid.png", shots)
    d.find_element(By.CSS_SELECTOR, '#tree a[data-folder="photos/été"]').click()
    wait.until(lambda _: "folder=" in d.current_url)
    assert shown_tiles(d) == {Path(r).name: "photos/été" for r in LAYOUT if r.startswith("été/")}
    assert [a.text for a in d.find_elements(By.CSS_SELECTOR, "#crumbs a")] == ["All photos", "photos"]
    d.find_element(By.CSS_SELECTOR, "#crumbs a:nth-of-type(2)").click()          # up to "photos"
    wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, '.folder-card[data-folder="photos/voyages"]'))
    d.find_element(By.CSS_SELECTOR, '.folder-card[data-folder="photos/voyages"]').click()
    wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, '.folder-card[data-folder="photos/voyages/Égypte"]'))
    assert shown_tiles(d) == {} and len(d.find_elements(By.CSS_SELECTOR, ".folder-card")) == 3
    d.find_element(By.CSS_SELECTOR, '.folder-card[data-folder="photos/voyages/Égypte"]').click()
    wait.until(lambda _: shown_tiles(d) == {"pyramide.jpg": "photos/voyages/Égypte"})
    assert d.find_element(By.CSS_SELECTOR, "#crumbs b").text == "Égypte"

    # ------------------------------------------------------------------ the filter, narrowed as one types
    d.get(server.url + "/")
    box = d.find_element(By.ID, "filter")

    def typed(text, expected):
        box.clear()
        box.send_keys(text)
        want = {Path(r).name for r in LAYOUT} if fold(text) in prefix else {Path(r).name for r in expected}
        wait.until(lambda _: d.find_element(By.TAG_NAME, "body").get_attribute("data-filtered") == text
                   and set(shown_tiles(d)) == want)

    summer = [r for r in LAYOUT if r.startswith("été/")]
    typed("ete", summer)                                             # without accents
    assert "q=ete" in d.current_url
    typed("ÉTÉ", summer)                                             # with them, upper case
    typed("ile aux", ["été/île aux poissons.jpg"])
    typed("cascade*", ["montagne/cascade*.jpg"])
    box.send_keys(Keys.ESCAPE)                                       # Esc empties the filter
    wait.until(lambda _: len(shown_tiles(d)) == len(LAYOUT))

    # ------------------------------------------------------------------ a photo's page: its panel and its original
    d.get(server.url + "/?q=" + "plage")
    d.find_element(By.CSS_SELECTOR, "#grid a.tile").click()
    wait.until(lambda _: d.find_elements(By.ID, "info"))
    info = d.find_element(By.ID, "info").text
    assert EXIF_MODEL in info and "2023-07-14 18:32:05" in info and "rotated 90° clockwise" in info, info
    for rel in (EXIF_PHOTO, HEIC_PHOTO):
        ids = {Path(im["path"]).name: im["id"] for im in httpx.get(server.url + "/api/images",
                                                                   params={"limit": 100}).json()["images"]}
        d.get(f"{server.url}/query?id={ids[Path(rel).name]}")
        link = d.find_element(By.ID, "open-original").get_attribute("href")
        got = d.execute_async_script(FETCH_BYTES, link)
        assert got.get("status") == 200, got
        assert base64.b64decode(got["b64"]) == world["paths"][rel].read_bytes(), rel
        assert got["type"] == ("image/heic" if rel == HEIC_PHOTO else "image/jpeg")
        assert d.find_element(By.ID, "download-original").get_attribute("href") == link + "?download=1"

    # ------------------------------------------------------------------ a HEIC upload, found by its own name
    heic = tmp_path / "Soirée d'été.HEIC"
    heic.write_bytes(heic_bytes(21))
    d.get(server.url + "/query")
    d.find_element(By.ID, "upload").send_keys(str(heic))
    d.find_element(By.ID, "add").click()
    wait.until(lambda _: d.find_element(By.TAG_NAME, "body").get_attribute("data-added")
               or d.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert not d.find_element(By.TAG_NAME, "body").get_attribute("data-error")
    d.get(server.url + "/")
    d.find_element(By.ID, "filter").send_keys("soiree d'ete")
    wait.until(lambda _: shown_tiles(d) == {"Soirée d'été.HEIC": "uploads"})
    wait.until(lambda _: loaded(d.find_element(By.CSS_SELECTOR, "#grid a.tile img")))

    # ------------------------------------------------------------------ a box query, the results, the keys
    ids = {Path(im["path"]).name: im["id"] for im in httpx.get(server.url + "/api/images",
                                                               params={"limit": 100}).json()["images"]}
    qid, rid = ids[Path(QUERY).name], ids[Path(RESULT).name]
    d.set_window_size(1280, 1000)
    d.get(f"{server.url}/query?id={qid}")
    img = d.find_element(By.ID, "qimg")
    wait.until(lambda _: loaded(img))
    drag_box(d, img, BOX_IN_SCENE, (512, 384))
    d.find_element(By.ID, "k").clear()
    d.find_element(By.ID, "k").send_keys("4")
    d.find_element(By.ID, "search").click()
    wait.until(lambda _: d.find_element(By.TAG_NAME, "body").get_attribute("data-results"))
    figures = d.find_elements(By.CSS_SELECTOR, "#results figure.result")
    order = [int(f.get_attribute("data-id")) for f in figures]
    at = order.index(rid)
    assert figures[at].get_attribute("data-verified") == "true" and at + 1 < len(order)
    wait.until(lambda _: all(loaded(i) for i in d.find_elements(By.CSS_SELECTOR, "#results img")))
    save_screenshot(d, "web-query.png", shots)
    keys = ActionChains(d)
    for _ in range(at + 2):
        keys.send_keys("j")
    keys.send_keys("k").perform()                                   # j past the result, k back onto it
    assert "selected" in figures[at].get_attribute("class")
    d.set_window_size(1280, 760)
    ActionChains(d).send_keys(Keys.ENTER).perform()                 # opens the match view over the results
    section = d.find_element(By.ID, "match")

    def showing(b):
        return section.get_attribute("data-b") == str(b) and section.get_attribute("data-lines")

    wait.until(lambda _: showing(rid))
    assert f"/match?a={qid}&b={rid}" in d.current_url and section.is_displayed()
    wait.until(lambda _: loaded_svg_images(d))
    save_screenshot(d, "web-match.png", shots)

    # the drawings stay inside their photos (the query box projected into box.png reaches outside it on both sides)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        m = c.post("/api/match", data={"a_id": qid, "b_id": rid, "box": ",".join(map(str, BOX_IN_SCENE))}).json()
    assert min(x for x, _ in m["box_in_b"]) < -20 and max(x for x, _ in m["box_in_b"]) > m["b"]["size"][0] + 20
    pa = d.execute_script(RECT, section.find_element(By.CSS_SELECTOR, "image.photo-a"))
    pb = d.execute_script(RECT, section.find_element(By.CSS_SELECTOR, "image.photo-b"))

    def inside(el, panel, tol=1.5):
        r = d.execute_script(RECT, el)
        return (r[0] >= panel[0] - tol and r[1] >= panel[1] - tol and r[2] <= panel[2] + tol and
                r[3] <= panel[3] + tol), (r, panel)

    drawn_b = section.find_elements(By.CSS_SELECTOR, "polygon.mbox, path.mbox-edge")
    assert len(drawn_b) == 2
    for el in drawn_b:
        ok, why = inside(el, pb)
        assert ok, why
    for el in section.find_elements(By.CSS_SELECTOR, "rect.qbox"):
        ok, why = inside(el, pa)
        assert ok, why
    lines = section.find_elements(By.CSS_SELECTOR, "line.corr")
    assert len(lines) == int(section.get_attribute("data-lines")) >= 9
    ends = d.execute_script("return Array.from(arguments[0]).map(l => [l.x1.baseVal.value, l.y1.baseVal.value, "
                            "l.x2.baseVal.value, l.y2.baseVal.value])", lines)
    la, lb = (d.execute_script("var b = arguments[0].getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height];",
                               section.find_element(By.CSS_SELECTOR, sel)) for sel in ("image.photo-a", "image.photo-b"))
    assert all(la[0] <= x1 <= la[2] and la[1] <= y1 <= la[3] and lb[0] <= x2 <= lb[2] and lb[1] <= y2 <= lb[3]
               for x1, y1, x2, y2 in ends)

    # next / previous result in the match view, Esc closes it (back to the results)
    ActionChains(d).send_keys(Keys.ARROW_RIGHT).perform()
    wait.until(lambda _: showing(order[at + 1]))
    ActionChains(d).send_keys("k").perform()
    wait.until(lambda _: showing(rid))
    ActionChains(d).send_keys(Keys.ESCAPE).perform()
    wait.until(lambda _: not section.is_displayed())
    assert d.current_url.endswith(f"/query?id={qid}") and len(d.find_elements(By.CSS_SELECTOR, "figure.result")) == 4
    for name in ("web-grid.png", "web-query.png", "web-match.png"):
        assert (shots / name).stat().st_size > 20_000


def loaded_svg_images(d) -> bool:
    """Whether the match view's two photos are drawn (an SVG image has no 'complete': decode them again)."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll('#match image')).every(function (im) {
          var probe = new Image(); probe.src = im.href.baseVal; return probe.complete && probe.naturalWidth > 0;
        });""")


def test_the_match_page_of_its_own_address(server, browser):
    """/match?a=&b= opened directly (a link, a reload): the same view; j / k go to the next / previous result of the
    last search of that query, Esc back to the query."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    d, wait = browser, WebDriverWait(browser, 60)
    ids = {Path(im["path"]).name: im["id"] for im in httpx.get(server.url + "/api/images",
                                                               params={"limit": 100}).json()["images"]}
    qid = ids[Path(QUERY).name]
    d.get(f"{server.url}/query?id={qid}")
    d.find_element(By.ID, "k").clear()
    d.find_element(By.ID, "k").send_keys("3")
    d.find_element(By.ID, "search").click()
    wait.until(lambda _: d.find_element(By.TAG_NAME, "body").get_attribute("data-results"))
    order = [int(f.get_attribute("data-id")) for f in d.find_elements(By.CSS_SELECTOR, "#results figure.result")]
    d.get(f"{server.url}/match?a={qid}&b={order[1]}")
    section = d.find_element(By.ID, "match")
    wait.until(lambda _: section.get_attribute("data-lines") or section.get_attribute("data-error"))
    assert not section.get_attribute("data-error") and section.get_attribute("data-b") == str(order[1])
    ActionChains(d).send_keys("j").perform()
    wait.until(lambda _: d.current_url.endswith(f"/match?a={qid}&b={order[2]}"))
    ActionChains(d).send_keys(Keys.ARROW_LEFT).perform()
    wait.until(lambda _: d.current_url.endswith(f"/match?a={qid}&b={order[1]}"))
    wait.until(lambda _: d.find_element(By.ID, "match").get_attribute("data-lines"))
    ActionChains(d).send_keys(Keys.ESCAPE).perform()
    wait.until(lambda _: d.current_url.endswith(f"/query?id={qid}"))
