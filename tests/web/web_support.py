"""Shared set-up of the web tests: one small index of real photos (box.png, box_in_scene.png, graf, leuven, the
Holidays samples) plus generated images (EXIF-rotated, 16-bit, CMYK), built once per session with one worker, and
a real uvicorn server on 127.0.0.1 (a free port) in a thread."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import shared_path
from helpers import copy_index

from retrieval.app.index import Index

OPENCV = ("box.png", "box_in_scene.png", "graf1.png", "graf3.png", "leuvenA.jpg", "leuvenB.jpg")
BOX_IN_SCENE = (95.0, 160.0, 275.0, 300.0)
"""A box around the box object (the Bastoncini box, box.png) in box_in_scene.png, original pixels."""


def textured(seed: int, size=(240, 180)) -> np.ndarray:
    """A random blocky RGB texture (detectable blobs and corners), uint8 (h, w, 3)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size[1] // 12, size[0] // 12, 3), dtype=np.uint8)
    return np.kron(small, np.ones((12, 12, 1), np.uint8))


def make_generated(folder: Path) -> dict:
    """Generated photos with the awkward encodings; returns {kind: path}."""
    from PIL import Image

    out = {}
    # EXIF orientation 6 (rotate 90 degrees clockwise to display): stored 240x180, shown 180x240
    im = Image.fromarray(textured(1))
    exif = Image.Exif()
    exif[0x0112] = 6
    out["exif"] = folder / "gen_exif6.jpg"
    im.save(out["exif"], quality=95, exif=exif.tobytes())
    # 16-bit gray: a horizontal ramp over the texture, values up to 65535
    gray = textured(2)[..., 0].astype(np.uint32) * 257
    out["gray16"] = folder / "gen_gray16.png"
    Image.fromarray(gray.astype(np.uint16)).save(out["gray16"])
    # CMYK JPEG
    out["cmyk"] = folder / "gen_cmyk.jpg"
    Image.fromarray(textured(3)).convert("CMYK").save(out["cmyk"], quality=95)
    return out


@pytest.fixture(scope="session")
def web_base(tmp_path_factory):
    """(photo folder, base index folder, {name: path}) built once per session."""
    src = shared_path("opencv_samples")
    holidays = shared_path("holidays", "images")
    root = tmp_path_factory.mktemp("web")
    photos = root / "photos"
    photos.mkdir()
    paths = {}
    for name in OPENCV:
        paths[name] = photos / name
        shutil.copy(src / name, paths[name])
    for p in sorted(holidays.iterdir()):
        shutil.copy(p, photos / p.name)
    generated = make_generated(photos)
    paths.update(generated)
    base = root / "base-index"
    idx = Index.create(base, preset="default")
    report = idx.sync(photos, workers=1)
    idx.close()
    assert not report.errors, report.errors
    return photos, base, paths


class ServerThread:
    """``retrieval serve``'s app (the same factory and socket set-up) in a uvicorn server in a thread."""

    def __init__(self, index, *, token=None, allow_hosts=(), **service_kw):
        import uvicorn

        from retrieval.cli.serve import bind
        from retrieval.web.app import create_app
        from retrieval.web.service import Service

        self.service = Service(index, workers=2, **service_kw)
        self.app = create_app(self.service, token=token, warm_up=False, host="127.0.0.1", allow_hosts=allow_hosts)
        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > 60 or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


def served_copy(web_base, tmp_path_factory, **kw):
    """A copy of the base index served by a :class:`ServerThread` (each test module mutates its own copy)."""
    photos, base, paths = web_base
    index = tmp_path_factory.mktemp("served") / "index"
    copy_index(base, index)
    return ServerThread(index, **kw), index


# ---------------------------------------------------------------------------------------------- the browser
def find_chrome() -> tuple[str | None, str | None, str]:
    """(browser, chromedriver, reason when one is missing): Debian's chromium and chromium-driver (``make setup``
    installs both); Selenium Manager is never used (it would download)."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                    if shutil.which(n)), None)
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists()
                                              else None)
    reason = ("" if browser and driver else
              "no Chromium/Chrome browser on PATH" if not browser else
              "no chromedriver (install Debian's 'chromium-driver'; make setup does)")
    return browser, driver, reason


def chrome_driver(profile_dir, width: int = 1280, height: int = 1000):
    """A headless Chromium driven by Selenium through the system chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as ChromeService

    browser, driver, reason = find_chrome()
    if reason:
        raise RuntimeError(reason)
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", f"--window-size={width},{height}",
                f"--user-data-dir={profile_dir}", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=ChromeService(executable_path=driver), options=opts)


def drag_box(driver, img, box, size) -> None:
    """Draw ``box`` (original pixels of an image of ``size``) on the displayed ``img`` with real mouse events: press
    at one corner, move in steps, release at the other."""
    from selenium.webdriver.common.action_chains import ActionChains

    w, h = img.size["width"], img.size["height"]
    s = w / size[0]
    x1, y1, x2, y2 = (v * s for v in box)
    chain = ActionChains(driver).move_to_element_with_offset(img, round(x1 - w / 2), round(y1 - h / 2))
    chain.click_and_hold()
    steps = 6
    dx, dy = (x2 - x1) / steps, (y2 - y1) / steps
    done_x = done_y = 0
    for i in range(1, steps + 1):
        tx, ty = round(dx * i), round(dy * i)
        chain.move_by_offset(tx - done_x, ty - done_y)
        done_x, done_y = tx, ty
    chain.release().perform()


# ---------------------------------------------------------------------------------------------- a server process
class ServeProcess:
    """``retrieval serve --port 0`` in its own process (``args``: more options; ``env``: more environment
    variables; ``preexec_fn``: run in the child before it starts, e.g. resource limits), with a client on it once it
    answers. ``stop()`` ends it (SIGINT, then SIGKILL)."""

    def __init__(self, index, *args, env=None, preexec_fn=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index),
                                      "--port", "0", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=dict(os.environ, **(env or {})), preexec_fn=preexec_fn)
        self.port = int(re.search(r":(\d+)/", self.proc.stderr.readline()).group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=300)
        for _ in range(600):
            try:
                self.client.get("/api/info")
                break
            except httpx.TransportError:
                time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def browser_session(tmp_path_factory):
    """A module fixture's body: a headless Chromium driver (skips when selenium or the browser is missing), quit
    after the module."""
    import pytest

    pytest.importorskip("selenium", reason="selenium is not installed (the dev extra)")
    reason = find_chrome()[2]
    if reason:
        pytest.skip(f"no browser for the browser test: {reason}")
    driver = chrome_driver(tmp_path_factory.mktemp("chrome-profile"))
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def assert_error(resp, status: int, *words):
    """The API's one-line error: ``status``, a JSON body ``{"error": line}`` (and ``"field"``, the request's field
    refused, when one is) without a traceback, holding ``words``."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) in ({"error"}, {"error", "field"}) and "\n" not in body["error"] and "Traceback" not in body["error"], body
    for w in words:
        assert w in body["error"], body["error"]
