"""``retrieval.bench.app`` through the library: the minibench mAP equals an AP recomputed by hand from the index
it built, and the throughput report counts what it indexed and queried (small preset, 8 generated images)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import small_preset

from retrieval.app.index import Index
from retrieval.bench.app import bench_app, make_synthetic_folder, minibench


def _holidays_ap(ranked, positives):
    """AP as holidays_map.py: trapezoid between the precisions before and after each positive's rank."""
    ranks = sorted(i for i, name in enumerate(ranked) if name in positives)
    ap = 0.0
    for ntp, rank in enumerate(ranks):
        p0 = ntp / rank if rank else 1.0
        ap += (p0 + (ntp + 1) / (rank + 1)) / 2 / len(positives)
    return ap


@pytest.fixture
def preset_file(tmp_path):
    p = tmp_path / "small.json"
    p.write_text(json.dumps(small_preset()))
    return p


def test_minibench_map_equals_a_recomputation(tmp_path, preset_file):
    src = tmp_path / "src"
    paths = make_synthetic_folder(src, 8, views=4, seed=0)
    rel = [Path(p).relative_to(src).as_posix() for p in paths]
    groups = [{"name": f"g{g}", "images": rel[4 * g:4 * g + 4]} for g in range(2)]
    spec = src / "spec.json"
    spec.write_text(json.dumps({"images": rel, "groups": groups}))
    res = minibench(spec, tmp_path / "work", preset=str(preset_file), reranks=("none",), workers=1)
    assert (res["n_images"], res["n_queries"]) == (8, 2) and set(res["map"]) == {"none"}
    photos = tmp_path / "work" / "photos"
    idx = Index.open(tmp_path / "work" / "index-small")
    try:
        assert idx.info()["indexed"] == 8
        aps = []
        for g in groups:
            q = photos / g["images"][0].replace("/", "__")
            hits = idx.search(str(q.resolve()), k=8, rerank="none")
            names = [Path(h.path).name.replace("__", "/") for h in hits]
            ranked = [n for n in names if n != g["images"][0]]
            aps.append(_holidays_ap(ranked, set(g["images"][1:])))
    finally:
        idx.close()
    assert res["map"]["none"] == pytest.approx(round(sum(aps) / len(aps), 4))


def test_throughput_counts_and_bench_app_needs_an_input(tmp_path, preset_file):
    out = bench_app(n_images=8, queries=3, presets=(str(preset_file),), workdir=str(tmp_path), workers=1)
    t = out["throughput"]
    assert set(out) == {"throughput"}
    assert t["n_images"] == t["indexed"] == 8 and t["queries"] == 3 and t["errors"] == 0
    assert "none" in t["latency"] and t["latency"]["none"]["p50_ms"] <= t["latency"]["none"]["p95_ms"]
    with pytest.raises(ValueError, match="minibench spec"):
        bench_app()
