"""The page of ``retrieval serve`` in a real headless browser (Debian's chromium + chromium-driver through Selenium):
the grid, picking box_in_scene.png, drawing a box around the box with the mouse, the results with the matched box
drawn on box.png, then the match view."""

from __future__ import annotations

import pytest
from web_support import BOX_IN_SCENE, browser_session, drag_box, served_copy, web_base  # noqa: F401


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from browser_session(tmp_path_factory)


@pytest.fixture(scope="module")
def server(web_base, tmp_path_factory):  # noqa: F811
    server, _ = served_copy(web_base, tmp_path_factory)
    yield server
    server.stop()


def test_draw_a_box_search_and_open_the_match_view(web_base, server, browser):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 120)
    d.get(server.url + "/")
    tiles = d.find_elements(By.CSS_SELECTOR, "a.tile")
    assert len(tiles) == len(list(web_base[0].iterdir()))
    # the first row of thumbnails decodes (served by id from the API; the others load lazily when scrolled to)
    wait.until(lambda drv: drv.execute_script("return Array.from(document.querySelectorAll('.tile img')).slice(0, 6)"
                                              ".every(i => i.complete && i.naturalWidth > 0)"))
    box = d.find_element(By.ID, "filter")
    box.send_keys("box_in", Keys.ENTER)
    wait.until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "a.tile")) == 1)
    d.find_element(By.CSS_SELECTOR, 'a.tile[data-path$="/box_in_scene.png"]').click()

    img = wait.until(EC.presence_of_element_located((By.ID, "qimg")))
    wait.until(lambda drv: drv.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img))
    stage = d.find_element(By.ID, "stage")
    size = (int(stage.get_attribute("data-width")), int(stage.get_attribute("data-height")))
    assert size == (512, 384)
    drag_box(d, img, (300, 40, 450, 200), size)          # a first box, then cleared
    assert d.find_element(By.ID, "boxdraw").is_displayed()
    d.find_element(By.ID, "clear").click()
    assert not d.find_element(By.ID, "boxdraw").is_displayed()
    drag_box(d, img, BOX_IN_SCENE, size)                  # the box around the box

    def drawn():
        return [float(v) for v in d.find_element(By.ID, "boxtext").text.split("box ", 1)[1].split(",")]

    tol = 512 / img.size["width"] * 3
    before = drawn()
    moved = ActionChains(d).move_to_element(d.find_element(By.ID, "boxdraw")).click_and_hold()
    moved.move_by_offset(15, 10).move_by_offset(15, 10).release().perform()    # dragging inside moves it
    s = 512 / img.size["width"]
    assert all(abs(a - b - m * s) <= tol for a, b, m in zip(drawn(), before, (30, 20, 30, 20), strict=True))
    ActionChains(d).move_to_element(d.find_element(By.ID, "boxdraw")).click_and_hold() \
        .move_by_offset(-30, -20).release().perform()
    drawn = drawn()
    assert all(abs(a - b) <= tol for a, b in zip(drawn, BOX_IN_SCENE, strict=True)), drawn
    d.find_element(By.ID, "search").click()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-results")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert not d.find_element(By.TAG_NAME, "body").get_attribute("data-error")

    figures = d.find_elements(By.CSS_SELECTOR, "#results figure.result")
    top3 = [f.get_attribute("data-path").rsplit("/", 1)[-1] for f in figures[:3]]
    assert "box.png" in top3, top3
    fig = figures[top3.index("box.png")]
    assert fig.get_attribute("data-verified") == "true"
    rect = fig.find_element(By.CSS_SELECTOR, "rect.box.match")
    r = d.execute_script("var b = arguments[0].getBoundingClientRect(); return [b.width, b.height];", rect)
    assert r[0] > 10 and r[1] > 10      # the matched box is drawn with a real size
    assert "verified" in fig.text and "inliers" in fig.text and "box.png" in fig.text

    fig.click()
    wait.until(EC.url_contains("/match?"))
    section = wait.until(lambda drv: drv.find_element(By.ID, "match") if drv.find_element(By.ID, "match")
                         .get_attribute("data-lines") or drv.find_element(By.ID, "match")
                         .get_attribute("data-error") else False)
    assert not section.get_attribute("data-error")
    assert section.get_attribute("data-verified") == "true"
    n = int(section.get_attribute("data-lines"))
    assert n >= 9 and len(section.find_elements(By.CSS_SELECTOR, "line.corr")) == n
    assert section.find_elements(By.CSS_SELECTOR, "polygon.mbox") and "inliers" in section.text


def test_upload_a_photo_search_and_match_in_place(web_base, server, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 120)
    d.get(server.url + "/")
    d.find_element(By.LINK_TEXT, "Search with a new photo").click()
    upload = wait.until(lambda drv: drv.find_element(By.ID, "upload"))
    upload.send_keys(str(web_base[2]["box.png"]))        # a file picked from the disk
    img = d.find_element(By.ID, "qimg")
    wait.until(lambda drv: drv.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img))
    d.find_element(By.ID, "search").click()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-results")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert not d.find_element(By.TAG_NAME, "body").get_attribute("data-error")
    first = d.find_elements(By.CSS_SELECTOR, "#results figure.result")[0]
    assert first.get_attribute("data-path").endswith("/box.png") and first.get_attribute("data-verified") == "true"
    first.click()                                          # the match view opens in the page (the upload is not stored)
    section = wait.until(lambda drv: drv.find_element(By.ID, "match") if drv.find_element(By.ID, "match")
                         .get_attribute("data-lines") else False)
    assert "/query" in d.current_url and section.get_attribute("data-verified") == "true"
    assert len(section.find_elements(By.CSS_SELECTOR, "line.corr")) == int(section.get_attribute("data-lines")) >= 9


def test_the_api_page_renders_its_operations_from_the_server_alone(server, browser):
    """/docs draws the API with Swagger UI served by the server itself: the operations appear although the page
    may reach nothing but the server (no CDN)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    d.get(server.url + "/docs")
    WebDriverWait(d, 120).until(lambda drv: drv.find_elements(By.CSS_SELECTOR, ".opblock"))
    paths = {e.text.replace("\u200b", "") for e in d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/api/search", "/api/images", "/api/info", "/api/match"} <= paths, paths
    loaded = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(u.startswith(server.url) for u in loaded), loaded


def test_the_page_adds_and_removes_a_photo_with_its_csrf_token(web_base, server, browser, tmp_path):  # noqa: F811
    """Add an uploaded photo to the index from the query page, then remove it from its own query page: the page's
    writes carry its CSRF token (the guard refuses a browser's write without it)."""
    import httpx
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from web_support import textured

    d = browser
    wait = WebDriverWait(d, 120)
    photo = tmp_path / "new-photo.png"
    Image.fromarray(textured(77, size=(320, 240))).save(photo)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        gen0 = c.get("/api/info").json()["generation"]
    d.get(server.url + "/query")
    assert d.get_cookie("retrieval_csrf")
    d.find_element(By.ID, "upload").send_keys(str(photo))
    d.find_element(By.ID, "add").click()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-added")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert not d.find_element(By.TAG_NAME, "body").get_attribute("data-error")
    new_id = int(d.find_element(By.TAG_NAME, "body").get_attribute("data-added"))
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get(f"/api/images/{new_id}").json()["status"] == "indexed"
    d.get(server.url + f"/query?id={new_id}")
    d.find_element(By.ID, "remove").click()
    wait.until(lambda drv: drv.switch_to.alert)
    d.switch_to.alert.accept()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-removed")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert d.find_element(By.TAG_NAME, "body").get_attribute("data-removed") == str(new_id)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.get(f"/api/images/{new_id}").status_code == 404
        assert c.get("/api/info").json()["generation"] == gen0 + 2


def test_a_page_of_another_site_cannot_plant_or_delete_photos(web_base, server, browser, tmp_path):  # noqa: F811
    """A hostile page on another origin (another port of the same machine: 'same-site' for the browser) posts a
    multipart form with an image to the server and calls it with fetch: the guard refuses both, nothing changes."""
    import http.server
    import threading

    import httpx
    from selenium.webdriver.support.ui import WebDriverWait

    target = server.url
    evil = f"""<!DOCTYPE html><html><body>
<form id="f" method="post" enctype="multipart/form-data" action="{target}/api/images" target="sink">
<input type="hidden" name="id" value="1"></form><iframe name="sink"></iframe>
<script>
var canvas = document.createElement("canvas"); canvas.width = 64; canvas.height = 64;
canvas.getContext("2d").fillRect(10, 10, 30, 30);
canvas.toBlob(function (blob) {{
  var fd = new FormData(); fd.append("image", blob, "planted.png");
  fetch("{target}/api/images", {{method: "POST", body: fd, mode: "no-cors", credentials: "include"}})
    .then(function () {{ document.body.setAttribute("data-done", "1"); }},
          function () {{ document.body.setAttribute("data-done", "1"); }});
  document.getElementById("f").submit();
}});
</script></body></html>""".encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(evil)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)   # a browser may open idle connections
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with httpx.Client(base_url=target, timeout=60) as c:
            before = c.get("/api/info").json()
        refused = server.app.state.refused_writes
        n_refused = len(refused)
        d = browser
        d.get(f"http://127.0.0.1:{httpd.server_address[1]}/")
        WebDriverWait(d, 60).until(lambda drv: drv.execute_script("return document.body.dataset.done"))
        WebDriverWait(d, 60).until(lambda drv: len(refused) >= n_refused + 2)   # the fetch and the form's post
        assert all("cross-site" in why for why in refused[n_refused:]), refused[n_refused:]
        with httpx.Client(base_url=target, timeout=60) as c:
            after = c.get("/api/info").json()
        assert (after["generation"], after["indexed"]) == (before["generation"], before["indexed"])
    finally:
        httpd.shutdown()


def test_the_page_filters_by_similarity_and_says_when_nothing_is_similar(web_base, server, browser, tmp_path):  # noqa: F811
    """The query page's "verified only" keeps the verified results; a similarity cut-off that nothing reaches (with
    verification off the list) leaves none, and the status line says so."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 120)
    d.get(server.url + "/")
    d.find_element(By.CSS_SELECTOR, 'a.tile[data-path$="/box_in_scene.png"]').click()
    wait.until(lambda drv: drv.find_elements(By.ID, "verified-only"))
    d.find_element(By.ID, "verified-only").click()
    d.find_element(By.ID, "search").click()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-results")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    n = int(d.find_element(By.TAG_NAME, "body").get_attribute("data-results"))
    figures = d.find_elements(By.CSS_SELECTOR, "#results figure")
    assert n >= 1 and len(figures) == n
    assert all("verified" in f.get_attribute("class").split() for f in figures), [f.get_attribute("class")
                                                                                   for f in figures]
    # a photo unlike any indexed one, uploaded, with a cut-off nothing reaches: no result, and the page says so
    from PIL import Image
    from web_support import textured

    noise = tmp_path / "unlike anything.png"
    Image.fromarray(textured(424242)).save(noise)
    d.get(server.url + "/query")
    wait.until(lambda drv: drv.find_elements(By.ID, "upload"))
    d.find_element(By.ID, "upload").send_keys(str(noise))
    d.find_element(By.ID, "min-similarity").send_keys("0.99")
    d.find_element(By.ID, "search").click()
    wait.until(lambda drv: drv.find_element(By.TAG_NAME, "body").get_attribute("data-results")
               or drv.find_element(By.TAG_NAME, "body").get_attribute("data-error"))
    assert d.find_element(By.TAG_NAME, "body").get_attribute("data-results") == "0"
    assert d.find_element(By.ID, "status").text.startswith("Nothing similar: none of the best results is verified "
                                                           "or at least 0.99 similar")
