"""`retrieval bench pq|ivfadc`: the JSON contract of the faiss comparison, and --train-seeds averaging."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from retrieval.cli.main import main

faiss = pytest.importorskip("faiss", reason="faiss-cpu (the reference of the bench) is not installed")


def _bench(*args):
    r = CliRunner().invoke(main, ["-q", "bench", *args, "--compare", "faiss", "--repeats", "1", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_ivfadc_bench_json_contract_and_seed_average():
    res = _bench("ivfadc", "--n", "3000", "--nq", "60", "--ntrain", "3000", "--d", "32", "--M", "8", "--nbits", "6",
                 "--nlist", "16", "--nprobe", "4", "--train-seeds", "3")
    assert res["params"]["train_seeds"] == 3
    for name in ("ours", "faiss"):
        r = res[name]
        # 8 sub-codes of 6 bits + an int64 id: faiss packs the bits, ours keeps one byte per sub-code
        assert r["bytes_per_vector"] == (8 if name == "ours" else 8 * 6 // 8) + 8
        assert len(r["runs"]) == 3
        for key in ("recall@1", "recall@10", "recall@100"):
            vals = np.array([run[key] for run in r["runs"]])
            assert r[key] == pytest.approx(vals.mean())
            assert r[key + "_sd"] == pytest.approx(vals.std(ddof=1))
            assert 0.0 <= r[key] <= 1.0
        # recall@R is non-decreasing in R for every training
        for run in r["runs"]:
            assert run["recall@1"] <= run["recall@10"] <= run["recall@100"]
        assert len(r["ms_per_query_runs"]) == 3 and r["ms_per_query"] == min(r["ms_per_query_runs"])
    assert res["ratio"] == pytest.approx(res["ours"]["ms_per_query"] / res["faiss"]["ms_per_query"])
    # three different trainings of our k-means differ (the seeds are really used)
    assert len({run["recall@100"] for run in res["ours"]["runs"]}) > 1 or \
        len({run["recall@10"] for run in res["ours"]["runs"]}) > 1


def test_pq_bench_single_training_has_no_spread_fields():
    res = _bench("pq", "--n", "2000", "--nq", "40", "--ntrain", "2000", "--d", "16", "--M", "4", "--nbits", "5")
    assert "recall@10_sd" not in res["ours"] and "runs" not in res["ours"]
    assert res["ours"]["mse"] > 0 and res["faiss"]["mse"] > 0
    # same method, same data: the quantisation errors agree closely (noise-free quality measure)
    assert res["ours"]["mse"] == pytest.approx(res["faiss"]["mse"], rel=0.05)
