"""``retrieval bench serve`` end to end on a small index: a real server process, concurrent clients, and a real
``retrieval index`` in a third process publishing a generation meanwhile. The checker must find every answer
consistent (its generation published, its hits that generation's images) and nothing stale; no speed is asserted
(figures live in docs/benchmarks.md)."""

from __future__ import annotations

import json

from cli_world import run
from conftest import FEATURE_CACHE, shared_path


def test_bench_serve_small_index_with_a_concurrent_sync(tmp_path):
    data = shared_path()
    shared_path("real", "holidays805", "jpg")
    res = run(["bench", "serve", "--data", data, "--images", "12", "--add", "3", "--searches", "60", "--clients", "3",
               "--workdir", tmp_path / "w", "--feature-store", FEATURE_CACHE, "--workers", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["errors"], out["inconsistent"], out["stale"]) == (0, 0, 0), out["first_problem"]
    assert out["images"] == 12 and out["added"] == 3 and out["searches"] == 60
    g0, g1 = out["generations_published"]
    assert g1 == g0 + 1 and sum(out["generations_seen"].values()) == 60
    assert set(out["generations_seen"]) <= {str(g0), str(g1)}
    assert out["latency_ms"]["p50"] > 0 and (tmp_path / "w" / "server.log").is_file()
    g = out["guard_overhead"]   # measured, not asserted against a speed: the guard really ran on both requests
    assert all(g[k]["guarded_us"] > g[k]["plain_us"] > 0 for k in ("get_page", "post_same_origin"))

