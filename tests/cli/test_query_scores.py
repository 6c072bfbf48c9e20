"""``retrieval query``: the score column never increases with the rank, ``similarity`` and ``verified`` are in
every JSON hit, no box or inliers on an unverified hit, the table has a header line and marks verified hits; the
query photo has similarity 1 at rank 1, indexed or as a copy outside the indexed folder; for every user preset
(default, compact, accurate, object; small variants) on a pool of real photos and generated views of them."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from helpers import make_pool, small_preset

from retrieval.engine.presets import load_preset

HEADER = ["rank", "score", "similarity", "verified", "inliers", "box", "path"]


def run(args):
    from retrieval.cli.main import main

    return CliRunner().invoke(main, args, catch_exceptions=False)


def preset_for(name):
    if name == "default":
        p = small_preset("q-default")
    elif name == "compact":
        p = load_preset("compact")
        p.update(name="q-compact", version=1)
        p["aggregation"] = {"method": "fisher", "n_components": 8, "alpha": 0.5}
        p["index"] = dict(p["index"], bits=64)
        p["training"] = {"max_images": 200, "max_descriptors": 6000, "random_state": 0}
    else:   # object, accurate
        p = load_preset(name)
        p.update(name=f"q-{name}", version=1)
        p["object_search"] = {**p["object_search"], "n_words": 500}
        p["training"] = {"max_images": 200, "max_descriptors": 20000, "random_state": 0}
    p["search"] = dict(p["search"], rerank="spatial")
    return p


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("qpool"))


@pytest.fixture(scope="module", params=["default", "compact", "object", "accurate"])
def index(request, tmp_path_factory, pool):
    d = tmp_path_factory.mktemp(f"q-{request.param}")
    preset_file = d / "preset.json"
    preset_file.write_text(json.dumps(preset_for(request.param)))
    photos = pool[0].parent
    res = run(["index", str(photos), "--index", str(d / "idx"), "--preset", str(preset_file), "--quiet"])
    assert res.exit_code == 0, res.output
    return request.param, str(d / "idx")


def query_json(idx, image, *extra):
    res = run(["query", str(image), "--index", idx, "--top", "12", "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def check_hits(kind, hits, reranked):
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    scores = [h["score"] for h in hits]
    assert all(a >= b for a, b in zip(scores, scores[1:], strict=False)), scores
    for h in hits:
        assert isinstance(h["verified"], bool) and 0.0 <= h["similarity"] <= 1.0, h
        if h["verified"]:
            assert reranked and h["inliers"] >= 1 and h["score"] > 1.0
        else:
            assert "box" not in h and "inliers" not in h and h["score"] == h["similarity"]
        assert ("distance" in h) == (kind != "default")
    # verified hits first, by inliers
    flags = [h["verified"] for h in hits]
    assert flags == sorted(flags, reverse=True)
    inl = [h["inliers"] for h in hits if h["verified"]]
    assert inl == sorted(inl, reverse=True)


def test_json_scores_monotonic_and_verified_marked(index, pool):
    kind, idx = index
    for image in (pool[0], pool[-1], pool[len(pool) // 2]):
        hits = query_json(idx, image)
        check_hits(kind, hits, reranked=True)
        # the query image itself is indexed: it comes first and is verified
        assert hits[0]["path"] == str(image.resolve()) and hits[0]["verified"]
        plain = query_json(idx, image, "--rerank", "none")
        check_hits(kind, plain, reranked=False)
        assert not any(h["verified"] for h in plain)
        # re-ranking changes the order, not the first-stage similarity of an image (query expansion, on in
        # the default preset, searches again with the expanded query: its similarities are the new query's)
        sim = {h["path"]: h["similarity"] for h in plain}
        for h in query_json(idx, image, "--qe", "0"):
            if h["path"] in sim:
                assert h["similarity"] == pytest.approx(sim[h["path"]], abs=1e-6)


def test_the_query_photo_scores_one_indexed_or_outside(index, pool, tmp_path):
    """The query photo's own hit has similarity 1 (within 1e-3) at rank 1, the same list whether the query is the
    indexed file or a copy of it outside the indexed folder; every similarity in [0, 1], never increasing down the
    first-stage list (--rerank none)."""
    kind, idx = index
    for image in (pool[0], pool[len(pool) // 2]):
        outside = tmp_path / f"copy-{image.name}"
        shutil.copy(image, outside)
        inside, copy = query_json(idx, image), query_json(idx, outside)
        for hits in (inside, copy):
            assert hits[0]["path"] == str(image.resolve())
            assert hits[0]["similarity"] == pytest.approx(1.0, abs=1e-3)
            assert all(0.0 <= h["similarity"] <= 1.0 for h in hits)
        assert [h["path"] for h in copy] == [h["path"] for h in inside]
        assert [h["similarity"] for h in copy] == pytest.approx([h["similarity"] for h in inside], abs=1e-6)
        first_stage = query_json(idx, outside, "--rerank", "none")
        sims = [h["similarity"] for h in first_stage]
        assert sims == sorted(sims, reverse=True) and sims[0] == pytest.approx(1.0, abs=1e-3)
        own = [h["similarity"] for h in first_stage if h["path"] == str(image.resolve())]
        assert own == [pytest.approx(1.0, abs=1e-3)]
        assert sims[-1] < 0.9   # the scale is the query photo's: the least similar of 12 photos are far below it


def test_table_has_a_header_and_marks_verified_hits(index, pool):
    kind, idx = index
    res = run(["query", str(pool[1]), "--index", idx, "--top", "12"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == HEADER
    rows = [ln.split(maxsplit=6) for ln in lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    scores = [float(r[1]) for r in rows]
    assert all(a >= b for a, b in zip(scores, scores[1:], strict=False)), scores
    js = query_json(idx, pool[1])
    assert [r[3] for r in rows] == ["yes" if h["verified"] else "no" for h in js]
    assert rows[0][3] == "yes" and rows[0][6] == js[0]["path"]
    for r in rows:
        if r[3] == "no":
            assert r[4] == "-" and r[5] == "-"
        else:
            assert int(r[4]) >= 1


def test_query_expansion_zero_is_off(index, pool):
    kind, idx = index
    preset_qe = preset_for(kind)["search"].get("query_expansion", 0)  # 1 in the default preset
    base = query_json(idx, pool[2])
    assert query_json(idx, pool[2], "--qe", str(preset_qe)) == base
    plain = query_json(idx, pool[2], "--qe", "0")
    check_hits(kind, plain, reranked=True)
    expanded = query_json(idx, pool[2], "--qe", "2")
    check_hits(kind, expanded, reranked=True)
    assert expanded[0]["verified"]
    res = CliRunner().invoke(__import__("retrieval.cli.main", fromlist=["main"]).main,
                             ["query", str(pool[2]), "--index", idx, "--qe", "2", "--rerank", "none"])
    assert res.exit_code != 0 and "--qe 2: expected 0 with re-ranking 'none'" in res.output and "spatial" in res.output
