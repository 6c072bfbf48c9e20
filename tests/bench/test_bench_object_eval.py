"""Fast version of `retrieval bench object`: box queries on real pairs among real distractors."""

import pytest
from conftest import shared_path

PAIRS = ("boat", "graf", "adam", "BruggeTower")


@pytest.fixture(scope="module")
def small_world(features_of):
    from retrieval.bench.object_eval import box_queries

    root = shared_path()
    queries = [q for q in box_queries(root) if q["name"] in PAIRS + ("box",)]
    paths = sorted({q["query"] for q in queries} | {q["target"] for q in queries}
                   | set((root / "holidays" / "images").glob("*.jpg")))
    feats = {p: features_of(p) for p in paths}
    return feats, queries


def test_box_queries_ground_truth_is_consistent(small_world):
    _, queries = small_world
    assert {q["name"] for q in queries} == set(PAIRS) | {"box"}
    for q in queries:
        x1, y1, x2, y2 = q["true_box"]
        assert x2 > x1 + 10 and y2 > y1 + 10, q


def test_delta1_and_l1_find_the_object(small_world):
    from retrieval.bench.object_eval import evaluate

    feats, queries = small_world
    # alpha_1 = 2: in a database of 24 images the true match dominates the denominator of eq. 9, so the
    # paper's alpha_1 = 0.5 (tuned on 105k images) gives a small wbar that favours images with few features
    res = evaluate(feats, queries, n_words=3000, methods=("l1", "delta1"), reranks=("none", "exact", "spatial"),
                   alpha=2.0,
                   alphas=(0.1, 2.0), vocabulary_params={"n_iter": 4})
    rows = {(c["method"], c["rerank"]): c for c in res["configs"]}
    assert res["n_images"] == len(feats)
    for key, row in rows.items():
        assert row["n_queries"] == len(queries)
        assert row["top1"] >= 0.8, (key, row)           # chance level is 1 / 24
    # exact re-ranking recomputes the same dissimilarity: the ranking of the shortlist cannot change
    for m in ("l1", "delta1"):
        assert rows[(m, "none")]["top1"] == rows[(m, "exact")]["top1"]
        assert rows[(m, "none")]["mAP"] == pytest.approx(rows[(m, "exact")]["mAP"], abs=1e-9)
    # spatial verification reports where the object is: the true image first with its box (IoU >= 0.5)
    for m in ("l1", "delta1"):
        assert rows[(m, "spatial")]["box_iou50_top1"] >= 0.8, rows[(m, "spatial")]
        assert rows[(m, "none")]["box_iou50_top1"] == 0.0              # no box without verification
    # Fig. 5: a too small alpha_1 only counts clutter (||T_j||_1) and ranks small images first
    sweep = {s["alpha"]: s for s in res["alpha_sweep"]}
    assert sweep[2.0]["mAP"] == pytest.approx(rows[("delta1", "none")]["mAP"])
    assert sweep[0.1]["mAP"] < sweep[2.0]["mAP"]
