"""An object searcher with signatures (`accurate`, `object`) saves its inverted file without postings: ASMK* scores
the signatures, and the BoW scorings (``--scoring delta1`` and the others) get the postings back from the forward
index, the same arrays bit for bit, built once however many searches ask at the same time. Searchers without
signatures, and folders saved with their postings, are read as before."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from helpers import pattern_images

from retrieval.core.persistence import FormatError
from retrieval.engine.object.searcher import ObjectSearcher
from retrieval.search.invfile import InvertedFile

BOW = ["l1", "l2", "delta1", "delta2"]


def images(n, seed=0):
    """``n`` images drawn from 4 shared patterns (each image: 30-70 features, part of a pattern plus noise)."""
    return pattern_images(n, seed, patterns=4, size=50, clutter=(5, 20))


@pytest.fixture(scope="module", params=[False, True], ids=["no-idf", "idf"])
def built(request):
    feats = images(30)
    s = ObjectSearcher(48, rootsift=False, idf=request.param, signatures=True, query_words=2, shortlist=10,
                       assignment="hard", vocabulary_params={"n_iter": 3}, random_state=0).fit(feats)
    s.add(np.arange(100, 130), feats)
    s.commit()
    return s, feats


def ranked(searcher, queries, method):
    return [[(h.id, h.score) for h in searcher.search(q, k=8, method=method, alpha=3.0 if method == "asmk" else 0.5,
                                                      rerank="exact" if method != "asmk" else "none")]
            for q in queries]


def test_a_signature_searcher_is_saved_without_postings_and_ranks_the_same(built, tmp_path):
    s, feats = built
    folder = s.save(tmp_path / "s")
    assert sorted(p.name for p in (folder / "invfile").glob("*.npy")) == ["idf.npy", "ids.npy", "norm1.npy", "norm2.npy"]
    assert json.loads((folder / "invfile" / "header.json").read_text())["format_version"] == 2
    back = ObjectSearcher.load(folder)
    assert not back.invfile_.holds_postings
    assert ranked(back, feats[:3], "asmk") == ranked(s, feats[:3], "asmk")
    assert not back.invfile_.holds_postings              # ASMK* never reads them
    for method in BOW:
        assert ranked(back, feats[:3], method) == ranked(s, feats[:3], method), method
    assert back.invfile_.holds_postings
    for name in ("indptr_", "postings_ids_", "postings_tf_"):
        a, b = np.asarray(getattr(s.invfile_, name)), np.asarray(getattr(back.invfile_, name))
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_a_folder_saved_with_its_postings_still_opens(built, tmp_path):
    """The layout of earlier versions: the inverted file with its postings (format version 1) next to the
    signatures."""
    s, feats = built
    folder = s.save(tmp_path / "old")
    s.invfile_.save(folder / "invfile", postings=True)
    assert json.loads((folder / "invfile" / "header.json").read_text())["format_version"] == 1
    back = ObjectSearcher.load(folder)
    assert back.invfile_.holds_postings
    for method in ["asmk", *BOW]:
        assert ranked(back, feats[:2], method) == ranked(s, feats[:2], method), method


def test_a_searcher_without_signatures_keeps_its_postings(tmp_path):
    feats = images(12, seed=3)
    s = ObjectSearcher(32, rootsift=False, idf=True, signatures=False, vocabulary_params={"n_iter": 3},
                       random_state=0).fit(feats)
    s.add(np.arange(12), feats)
    s.commit()
    folder = s.save(tmp_path / "bow")
    assert (folder / "invfile" / "postings_ids.npy").is_file()
    assert ranked(ObjectSearcher.load(folder), feats[:2], "delta1") == ranked(s, feats[:2], "delta1")


def test_the_postings_are_built_once_for_concurrent_searches(built, tmp_path):
    s, feats = built
    back = ObjectSearcher.load(s.save(tmp_path / "c"))
    calls, build = [], back._forward_postings

    def counted():
        calls.append(1)
        return build()

    back.invfile_.postings_from(counted)
    want = ranked(s, feats[:2], "delta2")
    start, got = threading.Barrier(6), []

    def search():
        start.wait()
        got.append(ranked(back, feats[:2], "delta2"))

    threads = [threading.Thread(target=search) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got == [want] * 6


def test_an_inverted_file_without_postings_needs_its_owner(built, tmp_path):
    s, _ = built
    s.invfile_.save(tmp_path / "inv", postings=False)
    with pytest.raises(FormatError, match="without its postings"):
        InvertedFile.load(tmp_path / "inv")
