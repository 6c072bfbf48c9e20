"""``retrieval bench cli`` runs real cold queries (new processes) against an existing index and reports their wall
times; no speed is asserted here (figures live in docs/benchmarks.md)."""

from __future__ import annotations

import json
import os

from cli_world import run


def test_bench_cli_times_cold_queries(cli_world, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    os.symlink(cli_world["index"], work / "index-cli-small")     # already built: nothing is indexed again
    res = run(["bench", "cli", "--photos", cli_world["photos"], "--preset", "cli-small", "--workdir", work,
               "--runs", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    r = out["presets"]["cli-small"]
    assert r["runs"] == 2 and 0 < r["min_s"] <= r["p50_s"] <= r["max_s"] and r["target_s"] is None
    assert out["startup"]["query_help"]["runs"] == 2 and out["photos"] == 16
