"""A model (global or object preset) learns and keeps the verification's match cells (retrieval.rerank.cells); an index whose model has
none (learnt before they existed) opens and verifies with the exact ratio test, with the same verdicts."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import shared_path

from retrieval.app.index import Index


def file_entry(path):
    import hashlib

    data = path.read_bytes()
    return {"blake2b": hashlib.blake2b(data, digest_size=16).hexdigest(), "size": len(data)}


@pytest.fixture(scope="module", params=["default", "accurate"])
def built(tmp_path_factory, request):
    d = tmp_path_factory.mktemp("cells")
    photos = d / "photos"
    photos.mkdir()
    for p in sorted(shared_path("real", "holidays805", "jpg").glob("*.jpg"))[:40]:
        shutil.copy(p, photos / p.name)
    idx = Index.create(d / "idx", preset=request.param, train_on="collection")
    idx.sync(photos, workers=1)
    idx.close()
    return d


def query_lists(index_path, photos):
    idx = Index.open(index_path)
    try:
        out = [[(h.id, h.verified, h.inliers) for h in idx.search(str(p), k=10)]
               for p in sorted(photos.glob("*.jpg"))[:12:3]]
        return out, idx.searcher().verifier.cells
    finally:
        idx.close()


def test_a_model_keeps_its_cells_and_an_older_model_verifies_exactly(built, tmp_path):
    model = built / "idx" / "model"
    assert (model / "match_cells.npz").is_file()
    with_cells, cells = query_lists(built / "idx", built / "photos")
    assert cells is not None and len(cells.centres) >= 16
    assert any(v for hits in with_cells for _, v, _ in hits)

    old = tmp_path / "old"
    shutil.copytree(built / "idx", old)
    info = json.loads((old / "model" / "model.json").read_text())
    info["files"] = [f for f in info["files"] if f != "match_cells.npz"]
    (old / "model" / "model.json").write_text(json.dumps(info))
    (old / "model" / "match_cells.npz").unlink()
    manifest = json.loads((old / "model" / "manifest.json").read_text())     # as a model of before wrote it
    manifest["files"].pop("match_cells.npz")
    manifest["files"]["model.json"] = file_entry(old / "model" / "model.json")
    (old / "model" / "manifest.json").write_text(json.dumps(manifest))
    exact, none = query_lists(old, built / "photos")
    assert none is None
    assert [[(i, v) for i, v, _ in hits] for hits in exact] == [[(i, v) for i, v, _ in hits] for hits in with_cells]
