"""The duplicates page lets the user change the keeper before acting (a real headless browser, as
test_web_duplicates_browser.py): each photo shows its folder, "Keep this one" makes another photo of a group its
keeper, and the plan of an action then moves the photo that was suggested instead; the API refuses a keeper that is
not in its group."""

from __future__ import annotations

import pytest
from dup_world import build_dup_world, tree
from web_support import ServerThread, browser_session


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from browser_session(tmp_path_factory)


@pytest.fixture(scope="module")
def served(tmp_path_factory, cli_world):
    world = build_dup_world(tmp_path_factory.mktemp("webdups-keeper"), cli_world)
    server = ServerThread(world["index"])
    yield server, world
    server.stop()


def body_attr(d, name):
    from selenium.webdriver.common.by import By

    return d.find_element(By.TAG_NAME, "body").get_attribute(name)


def test_the_user_changes_the_keeper_before_acting(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, world = served
    before = tree(world["photos"])
    d = browser
    wait = WebDriverWait(d, 120)
    d.get(server.url + "/duplicates")
    wait.until(lambda drv: body_attr(drv, "data-groups") or body_attr(drv, "data-error"))
    assert not body_attr(d, "data-error")
    near = next(g for g in d.find_elements(By.CSS_SELECTOR, "section.dup-group") if g.get_attribute("data-kind") == "near")
    for fig in near.find_elements(By.CSS_SELECTOR, "figure.dup-photo"):   # each photo shows its folder
        path = next(p for p in before if p in fig.find_element(By.CSS_SELECTOR, ".path").get_attribute("title"))
        folder = fig.find_element(By.CSS_SELECTOR, ".folder").text
        assert fig.find_element(By.CSS_SELECTOR, ".path").get_attribute("title").startswith(folder), (folder, path)
    suggested = near.find_element(By.CSS_SELECTOR, "figure.keeper")
    assert "p1.jpg" in suggested.text and not suggested.find_elements(By.CSS_SELECTOR, "button.keep-this")
    other = next(f for f in near.find_elements(By.CSS_SELECTOR, "figure.dup-photo") if "p1 small.png" in f.text)
    other_id = other.get_attribute("data-id")
    other.find_element(By.CSS_SELECTOR, "button.keep-this").click()
    wait.until(lambda drv: body_attr(drv, "data-kept") == other_id)
    near = next(g for g in d.find_elements(By.CSS_SELECTOR, "section.dup-group") if g.get_attribute("data-kind") == "near")
    keeper = near.find_element(By.CSS_SELECTOR, "figure.keeper")
    assert "p1 small.png" in keeper.text and "chosen by hand" in near.find_element(By.CSS_SELECTOR, "p.meta").text

    dialog = d.find_element(By.ID, "dup-dialog")
    d.find_element(By.ID, "dup-move").click()
    d.find_element(By.ID, "dup-to").send_keys(str(tmp_path / "moved"))
    d.find_element(By.ID, "dup-show-plan").click()
    wait.until(lambda drv: dialog.get_attribute("data-files") or dialog.get_attribute("data-error"))
    assert dialog.get_attribute("data-files") == "3", dialog.get_attribute("data-error")
    lines = [li.text for li in dialog.find_elements(By.CSS_SELECTOR, "#dup-plan-lines li")]
    moved = [ln.split(" -> ")[0] for ln in lines if "p1" in ln.split(" -> ")[0]]
    assert moved == [f"move {world['photos'] / 'p1.jpg'}"], lines   # the suggested keeper goes, the chosen stays
    assert any("near duplicate of" in ln and "p1 small.png" in ln.split(" -> ")[1] for ln in lines)
    d.find_element(By.ID, "dup-cancel").click()
    assert tree(world["photos"]) == before   # a plan only


def test_the_api_refuses_a_keeper_outside_its_group(served):
    import httpx

    server, _ = served
    with httpx.Client(base_url=server.url) as client:
        listing = client.get("/api/duplicates").json()
        near = next(g for g in listing["groups"] if g["kind"] == "near")
        outsider = next(im["id"] for g in listing["groups"] if g["group"] != near["group"] for im in g["images"])
        r = client.post("/api/duplicates/action",
                        json={"action": "trash", "keepers": {str(near["group"]): outsider}})
        assert r.status_code == 400 and f"not in group {near['group']}" in r.json()["error"], r.text
        extra = next(im for im in near["images"] if im["path"] != near["keeper_path"])
        r = client.post("/api/duplicates/action",
                        json={"action": "trash", "keepers": {str(near["group"]): extra["id"]}})
        assert r.status_code == 200, r.text
        trashed = [s["path"] for s in r.json()["plan"]["steps"] if s["group"] == near["group"]]
        assert trashed == [near["keeper_path"]]
