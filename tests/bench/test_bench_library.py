"""``retrieval bench library`` end to end at a tiny N: 8 real source photos, 60 replicas (40 through the normal sync,
20 bulk-injected), the writer steps in their own processes, a ``retrieval query`` process, searches and a real
``retrieval serve``. The figures must be consistent with what was done; no speed is asserted (figures live in
docs/benchmarks.md, "Libraries")."""

from __future__ import annotations

import json

import pytest
from cli_world import run
from conftest import shared_path

KEYS = ("n", "preset", "add_photos_per_s", "nochange_sync_s", "walk_stat_s", "add1_s", "add1000_s", "remove1000_s",
        "merge_s", "writer_peak_rss_mb", "reader_rss_mb", "first_answer_s", "query_p50_ms", "query_p95_ms",
        "query_verified_p50_ms", "api_info_ms", "api_page_ms", "search_bytes_per_photo", "feature_bytes_per_photo")


@pytest.mark.parametrize("preset, compact", [("default", "0"), ("accurate", "0"), ("default", "16")])
def test_bench_library_tiny_library_end_to_end(tmp_path, preset, compact):
    data = shared_path()
    shared_path("real", "oxford133", "jpg")
    res = run(["bench", "library", "--n", "60", "--workdir", tmp_path / "w", "--data", data, "--queries", "2",
               "--add-many", "10", "--sync-limit", "40", "--sources", "8", "--workers", "1", "--json",
               "--preset", preset, "--compact-features", compact])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert set(KEYS) <= set(out), set(KEYS) - set(out)
    assert (out["n"], out["preset"], out["source_photos"]) == (60, preset, 8)
    # the build: 40 synced with their own perturbed features, 20 injected; the catalog holds the 60
    assert (out["synced_photos"], out["injected_photos"], out["built_images"]) == (40, 20, 60)
    # nothing changed: nothing added; every file walked; then 1 added, 10 added, the same 10 removed
    assert out["nochange_added"] == 0 and out["walk_stat_files"] == 60
    assert (out["add1_added"], out["add_many"], out["add_many_added"], out["removed"]) == (1, 10, 10, 10)
    assert out["add1_upload_added"] == 1 and out["add1_upload_s"] > 0   # Index.add, the server's upload
    assert out["images"] == 62
    assert out["merge_s"] >= 0 and out["merge_segments"][1] == 1 and out["merge_segments"][0] >= 1
    assert out["writer_peak_rss_mb"] == max(out["writer_rss_mb"].values()) > 0
    assert out["reader_rss_mb"] > 0 and out["first_answer_s"] > 0
    assert out["queries"] == 2 and out["queries_without_hits"] == 0
    assert 0 < out["query_p50_ms"] <= out["query_p95_ms"]
    assert out["api_page_images"] == 62 - 62 // 2 and out["http_requests"] == 20
    assert out["search_bytes_per_photo"] > 0 and out["catalog_bytes_per_photo"] > 0
    # hard-linked entries (the 20 injected) count whole per photo, once on disk
    assert out["feature_bytes_per_photo"] > out["feature_bytes_on_disk_per_photo"] > 0
    assert out["compact_features"] == int(compact)
    if compact == "0":      # verified on the full entries
        assert out["verified_feature_bytes_per_photo"] == out["feature_bytes_per_photo"]
    else:                   # the 40 synced photos on compact entries (about a fifth), the 20 injected in full
        assert out["verified_feature_bytes_per_photo"] < 0.6 * out["feature_bytes_per_photo"]


def test_bench_library_names_a_missing_data_folder(tmp_path):
    res = run(["bench", "library", "--n", "10", "--workdir", tmp_path / "w", "--data", tmp_path / "nowhere"])
    assert res.exit_code == 1
    assert "nowhere/real/holidays805/jpg: missing" in res.output and "Traceback" not in res.output


def test_full_size_sources_are_minibench_and_oxford_without_thumbnails():
    from PIL import Image

    from retrieval.bench.library_photos import full_size_photos, source_photos

    paths = full_size_photos(shared_path())
    assert len(paths) == 112 + 133 == len(set(paths))
    assert source_photos(shared_path(), full_size=True) == paths
    oxford = [p for p in paths if "oxford133" in str(p)]
    assert len(oxford) == 133
    assert all(max(Image.open(p).size) >= 1000 for p in oxford)


def test_two_sets_of_sources_never_share_a_replica(tmp_path):
    """The thumbnail set keeps its unsalted replicas; a full-size or limited set salts its own, so a workdir that
    held one library never gives the other its features."""
    from retrieval.bench.library_photos import hash_bytes, prepare_sources, replica_png, write_replicas
    from retrieval.features import FeatureExtractor
    from retrieval.features.store import FeatureStore

    store = FeatureStore(tmp_path / "features")
    ex = FeatureExtractor("hesaff", max_side=256)
    limited = prepare_sources(shared_path(), store, ex, tmp_path / "a.json", workers=1, limit=2)
    other = prepare_sources(shared_path(), store, ex, tmp_path / "b.json", workers=1, limit=3)
    assert limited["salt"] and other["salt"] and limited["salt"] != other["salt"]
    assert len({replica_png(7), replica_png(7, bytes.fromhex(limited["salt"])),
                replica_png(7, bytes.fromhex(other["salt"]))}) == 3
    for k, src in enumerate((limited, other)):
        photos = tmp_path / f"photos{k}"
        write_replicas(photos, [0, 1, 2], src, store, ex.config_key, sync_limit=10)
        for i in range(3):
            h = hash_bytes(replica_png(i, bytes.fromhex(src["salt"])))
            got = store.get(h, ex.config_key)
            source = store.get(src["hashes"][i % len(src["hashes"])], ex.config_key)
            assert got.image_size == source.image_size          # each replica has its own set's source
            assert 0 < len(got) <= len(source)
