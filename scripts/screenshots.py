"""Screenshots of the web page of ``retrieval serve`` for the README (docs/images/web-*.png).

Builds the small index of the web tests (the OpenCV samples, the Holidays samples of ../shared/data and three
generated images), serves it on 127.0.0.1 and drives headless Chromium through Selenium with the browser test's
set-up (Debian's chromium and chromium-driver): the grid, a box query with its results, the match view.

    python scripts/screenshots.py [--data ../shared/data] [--out docs/images]
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "web")]

from web_support import (  # noqa: E402
    BOX_IN_SCENE,
    OPENCV,
    ServerThread,
    chrome_driver,
    drag_box,
    find_chrome,
    make_generated,
)

from retrieval.app.index import Index  # noqa: E402


def save_small(png: bytes, out: Path, colours: int = 128, scale: float = 0.75) -> int:
    """Write a screenshot scaled by ``scale`` as a palette PNG (to stay under about 200 kB); returns the size."""
    from PIL import Image

    im = Image.open(io.BytesIO(png)).convert("RGB")
    im = im.resize((round(im.width * scale), round(im.height * scale)), Image.Resampling.LANCZOS)
    im.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return out.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = ap.parse_args()
    data, out = Path(args.data), Path(args.out)
    if find_chrome()[2]:
        print(f"cannot take screenshots: {find_chrome()[2]}", file=sys.stderr)
        return 1
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out.mkdir(parents=True, exist_ok=True)
    # a fixed, plain folder name: the paths shown in the screenshots carry no random temporary suffix
    work = Path(tempfile.gettempdir()) / "retrieval-demo"
    shutil.rmtree(work, ignore_errors=True)
    photos = work / "photos"
    photos.mkdir(parents=True)
    for name in OPENCV:
        shutil.copy(data / "opencv_samples" / name, photos / name)
    for p in sorted((data / "holidays" / "images").iterdir()):
        shutil.copy(p, photos / p.name)
    make_generated(photos)
    idx = Index.create(work / "index", preset="default")
    idx.sync(photos, workers=1)
    ids = {Path(r["path"]).name: r["id"] for r in idx.catalog.rows()}
    idx.close()
    server = ServerThread(work / "index")
    driver = chrome_driver(work / "profile", width=1280, height=900)
    wait = WebDriverWait(driver, 120)
    try:
        driver.get(server.url + "/")
        wait.until(lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('.tile img')).every(i => i.complete && i.naturalWidth > 0)"))
        print("grid", save_small(driver.get_screenshot_as_png(), out / "web-grid.png"))

        driver.set_window_size(1280, 1000)
        driver.get(f"{server.url}/query?id={ids['box_in_scene.png']}")
        img = driver.find_element(By.ID, "qimg")
        wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img))
        drag_box(driver, img, BOX_IN_SCENE, (512, 384))
        driver.find_element(By.ID, "k").clear()
        driver.find_element(By.ID, "k").send_keys("4")
        driver.find_element(By.ID, "search").click()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-results"))
        wait.until(lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('#results img')).every(i => i.complete && i.naturalWidth > 0)"))
        time.sleep(0.3)
        print("query", save_small(driver.get_screenshot_as_png(), out / "web-query.png"))

        driver.set_window_size(1280, 760)
        fig = driver.find_element(By.CSS_SELECTOR, '#results figure[data-path$="/box.png"]')
        fig.click()
        wait.until(lambda d: d.find_element(By.ID, "match").get_attribute("data-lines"))
        time.sleep(0.5)
        print("match", save_small(driver.get_screenshot_as_png(), out / "web-match.png"))
    finally:
        driver.quit()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
