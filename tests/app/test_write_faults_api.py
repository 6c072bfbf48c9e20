"""The server's add and delete under faults: every write step of ``POST /api/images`` and ``DELETE
/api/images/{id}`` made to fail in turn (a full disk, a read-only file system, a permission refused, an I/O error:
:mod:`write_faults_support`), and the answer compared with the state afterwards: an error answer (507, 503, 500,
one line naming the cause) means the catalog, the generation and every file of the index are byte for byte as
before and ``uploads/`` holds nothing new; a 2xx means the photo is committed and searchable (or gone from the
searches, for a delete). After each refused write the same write, done again without the fault, succeeds.

Also a disk that becomes read-only (or refuses permission) while the index is served: searches and pages go on,
every write answers 503 "the index is read-only", nothing changes."""

from __future__ import annotations

import errno
import shutil

import pytest
from helpers import copy_index, make_pool, photo_index
from write_faults_support import EXPECTED_STATUS, EXPECTED_WORDS, Faults, index_state

from retrieval.app.index import Index

ERRORS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO)
HOST = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(an index of 8 photos, the photo to upload, an indexed photo to delete's path)."""
    d = tmp_path_factory.mktemp("faults-api")
    pool = make_pool(d / "pool")
    index, photos = photo_index(d, pool, (8,))
    (index / "uploads" / ".incoming").mkdir(parents=True)   # made by the first upload of any server
    return index, pool[9], str(photos / pool[2].name)


def client_of(index):
    from fastapi.testclient import TestClient

    from retrieval.web.app import create_app
    from retrieval.web.service import Service

    return TestClient(create_app(Service(index, workers=1), warm_up=False), base_url=HOST)


def one_line_error(resp, status, words):
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert set(body) == {"error"} and "\n" not in body["error"] and "Traceback" not in body["error"], body
    assert words in body["error"], body["error"]


def consistent(index) -> tuple[int, set]:
    """(generation, indexed ids) once the catalog and the search state are checked to agree."""
    idx = Index.open(index)
    try:
        gen, rows = idx.catalog.snapshot()
        ids = {r["id"] for r in rows if r["status"] == "indexed"}
        assert set(idx.searcher().backend.ids.tolist()) == ids
        return gen, ids
    finally:
        idx.close()


def searchable(index, image_id) -> bool:
    idx = Index.open(index)
    try:
        return image_id in {h.id for h in idx.search(int(image_id), k=3, rerank="none")}
    finally:
        idx.close()


def post(client, photo):
    return client.post("/api/images", files={"image": ("new.jpg", photo.read_bytes())})


def uploads_of(index) -> list[str]:
    return sorted(p.name for p in (index / "uploads").iterdir() if p.is_file())


def run_steps(base, tmp_path, operation, check_success):
    """``operation(client, index)`` on a fresh copy of the index for every write step in turn, that step failing:
    every answer must tell the truth (``check_success`` for a 2xx)."""
    index0, _, _ = base
    probe = copy_index(index0, tmp_path / "probe")
    with client_of(probe) as client, Faults(probe) as counting:
        resp = operation(client, probe)
    assert resp.status_code in (200, 201), resp.text
    steps = counting.calls
    assert len(steps) > 10, steps
    problems, kinds = [], set()
    for k in range(len(steps)):
        error = ERRORS[k % len(ERRORS)]
        index = copy_index(index0, tmp_path / f"step{k}")
        before = index_state(index)
        with client_of(index) as client:
            with Faults(index, fail_at=k, error=error) as faults:
                resp = operation(client, index)
            what = f"step {k} {faults.failed} {errno.errorcode[error]}: {resp.status_code} {resp.text[:300]}"
            try:
                if resp.status_code in (200, 201):
                    check_success(index, resp)
                    kinds.add("2xx")
                else:
                    one_line_error(resp, EXPECTED_STATUS[error], EXPECTED_WORDS[error])
                    assert index_state(index) == before, "the state changed"
                    consistent(index)
                    again = operation(client, index)   # the same write without the fault completes
                    assert again.status_code in (200, 201), again.text
                    check_success(index, again)
                    kinds.add(resp.status_code)
            except AssertionError as exc:
                problems.append(f"{what}: {exc}")
        shutil.rmtree(index, ignore_errors=True)
    assert problems == []
    assert {507, 503, 500, "2xx"} <= kinds, kinds   # every cause was met and answered, and so were later steps


def test_every_failing_step_of_an_upload_answers_the_truth(base, tmp_path):
    _, photo, _ = base

    def add(client, index):
        return post(client, photo)

    def committed(index, resp):
        record = resp.json()["image"]
        assert resp.status_code == 201 and record["status"] == "indexed"
        assert len(uploads_of(index)) == 1
        gen, ids = consistent(index)
        assert record["id"] in ids and searchable(index, record["id"])

    run_steps(base, tmp_path, add, committed)


def test_every_failing_step_of_a_delete_answers_the_truth(base, tmp_path):
    index0, _, gone = base
    idx = Index.open(index0)
    gone_id = idx.catalog.row_by_path(gone)["id"]
    idx.close()

    def delete(client, index):
        return client.delete(f"/api/images/{gone_id}")

    def removed(index, resp):
        assert resp.status_code == 200 and resp.json()["removed"] == gone_id
        gen, ids = consistent(index)
        assert gone_id not in ids and not searchable_path(index, gone)

    def searchable_path(index, path):
        idx = Index.open(index)
        try:
            return path in {h.path for h in idx.search(path, k=10, rerank="none")}
        finally:
            idx.close()

    run_steps(base, tmp_path, delete, removed)


def test_a_disk_that_becomes_read_only_while_served(base, tmp_path):
    """Served, then every write under the index refused (EROFS, then EACCES): searches and pages answer, uploads
    and deletes answer 503 "the index is read-only" in one line, and nothing changes; once writable again, an
    upload is added."""
    index0, photo, gone = base
    index = copy_index(index0, tmp_path / "index")
    with client_of(index) as client:
        first = client.post("/api/search", data={"id": 0, "k": 3})
        assert first.status_code == 200
        for error in (errno.EROFS, errno.EACCES):
            before = index_state(index)
            with Faults(index) as faults:
                faults.always = error
                assert client.post("/api/search", data={"id": 0, "k": 3}).json()["hits"] == first.json()["hits"]
                assert client.get("/").status_code == 200
                assert client.get("/api/images").status_code == 200
                one_line_error(post(client, photo), 503, "the index is read-only")
                one_line_error(client.delete("/api/images/2"), 503, "the index is read-only")
            assert index_state(index) == before and uploads_of(index) == []
        resp = post(client, photo)
        assert resp.status_code == 201 and searchable(index, resp.json()["image"]["id"])
