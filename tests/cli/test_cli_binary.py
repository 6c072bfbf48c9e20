"""``retrieval bench binary`` / ``bench kernels``: option validation and the speed report's schema."""

from __future__ import annotations

import json

from click.testing import CliRunner

from retrieval.cli.main import main


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


def test_cli_embedding_list_is_the_bench_list():
    from retrieval.bench.binary import EMBEDDINGS
    from retrieval.cli.binary import EMBEDDINGS as CLI_EMBEDDINGS

    assert CLI_EMBEDDINGS == EMBEDDINGS


def test_repeats_must_be_positive():
    r = CliRunner().invoke(main, ["bench", "binary", "--repeats", "0"])
    assert r.exit_code == 2 and "--repeats" in r.output


def test_aggregate_runs_averages_matching_rows_over_draws():
    from retrieval.bench.binary import aggregate_runs

    def row(emb, dist, r10, mAP=None):
        out = {"embedding": emb, "bits": 32, "distance": dist, "recall@10": r10, "recall@100": 1.0,
               "ms_per_query": 0.5}
        if mAP is not None:
            out["mAP"] = mAP
        return out

    runs = [[row("LSH", "hamming", 0.2, 0.5), row("LSH", "expectation", 0.3, 0.6)],
            [row("LSH", "expectation", 0.5, 0.8), row("LSH", "hamming", 0.4, 0.7)],
            [row("LSH", "hamming", 0.3, 0.6)]]
    out = aggregate_runs(runs)
    assert [(r["distance"], r["repeats"]) for r in out] == [("hamming", 3), ("expectation", 2)]
    ham, exp_ = out
    assert ham["recall@10"] == 0.3 and ham["recall@10_runs"] == [0.2, 0.4, 0.3]
    assert ham["recall@10_sd"] == 0.1                      # sample sd of 0.2, 0.4, 0.3
    assert exp_["recall@10"] == 0.4 and exp_["mAP"] == 0.7 and exp_["recall@100_sd"] == 0.0
    single = aggregate_runs(runs[:1])
    assert single[0]["recall@10_sd"] is None and single[0]["repeats"] == 1
    none_row = aggregate_runs([[{"embedding": "x", "bits": 1, "distance": "l2", "ms_per_query": None}]])
    assert none_row[0]["ms_per_query"] is None


def test_alpha_diagnostics_by_hand():
    import numpy as np

    from retrieval.bench.binary import alpha_diagnostics
    from retrieval.codes.binary import LSH

    train = np.array([[1.0, 1.0], [3.0, -1.0], [-2.0, 2.0], [-4.0, -3.0]], dtype=np.float32)
    e = LSH(2, center=False, random_state=0).fit(train)
    e.projections_ = np.eye(2, dtype=np.float32)
    e.fit_statistics(train)          # alpha^1 = (2, 1.5), alpha^0 = (-3, -2): spreads 5 and 3.5
    base = train / 2                 # variances divided by 4
    d = alpha_diagnostics(e, train, base)
    assert d["var_ratio"] == 4.0
    assert d["alpha_spread_ratio"] == round(5 / 3.5, 3)
    assert d["alpha_asymmetry"] == round(float(np.median([1 / 5, 0.5 / 3.5])), 3)
