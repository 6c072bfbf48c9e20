"""The duplicates page of ``retrieval serve`` in a real headless browser (Debian's chromium + chromium-driver through
Selenium), on the small index of tests/web/dup_world.py: reached from the navigation, the groups with their kinds
and keepers, the matched region drawn on the same-scene photos; "Move extra copies…" shows the plan for
confirmation, moves the files once confirmed, and "Undo" puts them back; "Already have these?" checks an upload."""

from __future__ import annotations

import shutil

import pytest
from dup_world import build_dup_world, tree
from web_support import ServerThread, browser_session


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from browser_session(tmp_path_factory)


@pytest.fixture(scope="module")
def served(tmp_path_factory, cli_world):
    world = build_dup_world(tmp_path_factory.mktemp("webdups-browser"), cli_world)
    server = ServerThread(world["index"])
    yield server, world
    server.stop()


def body_attr(d, name):
    from selenium.webdriver.common.by import By

    return d.find_element(By.TAG_NAME, "body").get_attribute(name)


def test_groups_move_with_confirmation_then_undo(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, world = served
    photos = world["photos"]
    before = tree(photos)
    d = browser
    wait = WebDriverWait(d, 120)
    d.get(server.url + "/")
    d.find_element(By.LINK_TEXT, "Duplicates").click()
    wait.until(lambda drv: body_attr(drv, "data-groups") or body_attr(drv, "data-error"))
    assert not body_attr(d, "data-error")
    groups = d.find_elements(By.CSS_SELECTOR, "section.dup-group")
    kinds = sorted(g.get_attribute("data-kind") for g in groups)
    assert kinds == ["exact", "exact", "near", "scene"]
    labels = {g.get_attribute("data-kind"): g.find_element(By.CSS_SELECTOR, "h2 .kind-label").text for g in groups}
    assert labels == {"exact": "exact copies", "near": "near duplicates", "scene": "same scene"}
    colours = {g.get_attribute("data-kind"): g.value_of_css_property("border-left-color") for g in groups}
    assert len(set(colours.values())) == 3                        # the kinds look different
    for g in groups:
        figs = g.find_elements(By.CSS_SELECTOR, "figure.dup-photo")
        keepers = [f for f in figs if "keeper" in f.get_attribute("class").split()]
        assert len(figs) == 2 and len(keepers) == 1
        assert keepers[0].find_element(By.CSS_SELECTOR, ".keeper-badge").text.lower() == "keeper"
        assert all("\u00d7" in f.text and ("JPEG" in f.text or "PNG" in f.text) for f in figs)
    near = next(g for g in groups if g.get_attribute("data-kind") == "near")
    keeper = near.find_element(By.CSS_SELECTOR, "figure.keeper")
    assert "p1.jpg" in keeper.text and "p1 small.png" in near.text
    # the photos come from the thumbnail route (by id) and decode
    wait.until(lambda drv: drv.execute_script("return Array.from(document.querySelectorAll('.dup-photo img'))"
                                              ".every(i => i.complete && i.naturalWidth > 0)"))
    srcs = [i.get_attribute("src") for i in d.find_elements(By.CSS_SELECTOR, ".dup-photo img")]
    assert all("/api/images/" in s and s.endswith("/thumbnail?size=small") for s in srcs)
    scene = next(g for g in groups if g.get_attribute("data-kind") == "scene")
    rects = scene.find_elements(By.CSS_SELECTOR, "rect.region")
    assert len(rects) == 2
    for rect in rects:                                            # the matched region, drawn inside the photo
        r = d.execute_script("var b = arguments[0].getBoundingClientRect(), f = arguments[0].closest('.frame')"
                             ".getBoundingClientRect(); return [b.left - f.left, b.top - f.top, b.width, b.height,"
                             " f.width, f.height];", rect)
        assert r[2] > 10 and r[3] > 10 and r[0] >= -1 and r[1] >= -1
        assert r[0] + r[2] <= r[4] + 1 and r[1] + r[3] <= r[5] + 1

    dialog = d.find_element(By.ID, "dup-dialog")
    d.find_element(By.ID, "dup-trash").click()                    # a plan shown, then cancelled: nothing done
    wait.until(lambda drv: dialog.get_attribute("data-files") or dialog.get_attribute("data-error"))
    assert dialog.get_attribute("data-files") == "3" and not d.find_element(By.ID, "dup-to").is_displayed()
    assert all(li.text.startswith("trash") for li in dialog.find_elements(By.CSS_SELECTOR, "#dup-plan-lines li"))
    d.find_element(By.ID, "dup-cancel").click()
    assert dialog.get_attribute("open") is None and tree(photos) == before

    dest = tmp_path / "moved"
    d.find_element(By.ID, "dup-move").click()
    assert dialog.get_attribute("open") is not None and not dialog.get_attribute("data-files")
    d.find_element(By.ID, "dup-to").send_keys(str(dest))
    d.find_element(By.ID, "dup-show-plan").click()
    wait.until(lambda drv: dialog.get_attribute("data-files") or dialog.get_attribute("data-error"))
    assert dialog.get_attribute("data-files") == "3", dialog.get_attribute("data-error")
    lines = [li.text for li in dialog.find_elements(By.CSS_SELECTOR, "#dup-plan-lines li")]
    assert len(lines) == 3 and all(ln.startswith("move") and str(dest) in ln for ln in lines)
    assert "3 files" in d.find_element(By.ID, "dup-plan-summary").text
    assert tree(photos) == before and not dest.exists()          # shown, not done
    d.find_element(By.ID, "dup-confirm").click()
    wait.until(lambda drv: body_attr(drv, "data-done") or dialog.get_attribute("data-error"))
    assert body_attr(d, "data-done") == "3"
    result = d.find_element(By.ID, "dup-result")
    assert "3 files moved" in result.text
    assert sorted(tree(dest)) == ["copies/p0.jpg", "copies/p1 small.png", "copies/p2.jpg"]
    wait.until(lambda drv: body_attr(drv, "data-groups") == "1")   # only the same-scene group is left
    assert [g.get_attribute("data-kind") for g in d.find_elements(By.CSS_SELECTOR, "section.dup-group")] == ["scene"]

    result.find_element(By.ID, "dup-undo").click()
    wait.until(lambda drv: body_attr(drv, "data-undone") or body_attr(drv, "data-error"))
    assert body_attr(d, "data-undone") == "3"
    assert tree(photos) == before
    wait.until(lambda drv: body_attr(drv, "data-groups") == "4")


def test_already_have_these(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, world = served
    mine = tmp_path / "from my phone.jpg"
    shutil.copy(world["photos"] / "p3.jpg", mine)
    d = browser
    d.get(server.url + "/duplicates")
    d.find_element(By.ID, "against-files").send_keys(str(mine))
    d.find_element(By.ID, "against-check").click()
    WebDriverWait(d, 120).until(lambda drv: body_attr(drv, "data-against") or body_attr(drv, "data-error"))
    assert body_attr(d, "data-against") == "1"
    item = d.find_element(By.CSS_SELECTOR, ".against-item")
    assert item.get_attribute("data-name") == "from my phone.jpg" and item.get_attribute("data-kind") == "exact"
    assert "p3.jpg" in item.text and item.find_elements(By.CSS_SELECTOR, "figure.dup-photo img")
