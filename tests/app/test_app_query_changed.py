"""A query naming an indexed file that changed or disappeared since it was indexed: a warning, and the file's
current content (or, once deleted, its indexed content)."""

from __future__ import annotations

import logging
import shutil

from conftest import FEATURE_CACHE

from retrieval.app.demo_data import build_demo_folder
from retrieval.app.index import Index


def test_changed_and_deleted_query_files(tmp_path, caplog):
    made = build_demo_folder(tmp_path / "src")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in made["photos"][:6]:
        shutil.copy(p, photos)
    idx = Index.create(tmp_path / "i", "default", feature_store=FEATURE_CACHE)
    idx.sync(photos)
    names = sorted(p.name for p in photos.iterdir())
    a, b = str(photos / names[0]), str(photos / names[1])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="retrieval.app.index"):
        before = idx.search(a, k=3, rerank="none")
        assert before[0].path == a and not [r for r in caplog.records if r.levelno >= logging.WARNING]
        shutil.copy(b, a)                                           # a's file now holds b's photo
        after = idx.search(a, k=3, rerank="none")
        assert "changed since it was indexed" in caplog.text and a in caplog.text
        # described from its current content: b's photo, whose copy in the index is b
        assert after[0].path == b and after[0].similarity > 0.99
        caplog.clear()
        (photos / names[2]).unlink()
        gone = idx.search(str(photos / names[2]), k=3, rerank="none")
        assert "was deleted since it was indexed" in caplog.text
        assert gone[0].path == str(photos / names[2])              # its indexed content finds itself
