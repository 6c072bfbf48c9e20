"""``retrieval bench binary`` / ``bench kernels``: option validation and the speed report's schema."""

from __future__ import annotations

import json

from click.testing import CliRunner

from retrieval.apps.cli import main


def test_bad_options_are_reported_before_any_work():
    r = CliRunner().invoke(main, ["bench", "binary", "--bits", "32,x"])
    assert r.exit_code == 2 and "comma-separated integers" in r.output
    r = CliRunner().invoke(main, ["bench", "binary", "--embeddings", "LSH,FOO"])
    assert r.exit_code == 2 and "unknown embedding 'FOO'" in r.output
    r = CliRunner().invoke(main, ["bench", "kernels", "--bits", "0"])
    assert r.exit_code == 2 and "positive integers" in r.output


def test_speed_report_schema_on_a_small_database():
    r = CliRunner().invoke(main, ["-q", "bench", "binary", "--speed", "--n-codes", "3000", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["n"] == 3000 and out["nbytes"] == 8 and out["threads"] == 1
    assert set(out["ms_per_query"]) >= {"hamming", "asym_dE", "asym_dLB", "pq_adc"}
    assert out["dE_vs_pq_adc"] > 0
