"""Presets meant for large collections run on a small one: every data-bound parameter is reduced to
what the training data supports, with one warning per parameter, and the effective values are recorded in the
model, the index info and the `eval run` report (rule in docs/user-guide.md, "Small collections")."""

from __future__ import annotations

import json
import re

import numpy as np
from click.testing import CliRunner
from helpers import small_spec

from retrieval.cli.main import main
from retrieval.core.persistence import load_estimator


def run(tmp_path, preset, *sets):
    spec = tmp_path / "bench" / "spec.json"
    if not spec.exists():
        spec = small_spec(tmp_path)  # 4 groups of 3 + 2 distractors = 14 images
    args = ["eval", "run", "groups", "--spec", str(spec), "--preset", preset, "--work", str(tmp_path / "work"),
            "--workers", "1", "--json", "--set", "features.max_side=480"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout[res.stdout.index("{"):]), res.stderr


def reduction_warnings(stderr, param):
    """The CLI's log lines (``WARNING <logger>: preset 'NAME': PARAM = ... reduced to ...``) about ``param``."""
    # a log line may follow a progress bar's last redraw on the same terminal line
    return re.findall(rf"WARNING \S+: preset '[^']+': {re.escape(param)} = [^\n]*", stderr)


def test_adc_preset_on_14_images_runs_warns_and_records(tmp_path, monkeypatch):
    """ADC 16 x 8 needs 256 codewords per sub-quantiser; 14 training vectors support 2**3 = 8 (3 = floor(log2 14)).
    The 128-d PCA needs 256 training images: skipped (D' = D = 16 x 64)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    report, stderr = run(tmp_path, "paper-002-vlad16-adc16x8")
    eff = report["effective_parameters"]
    assert eff["index.nbits"]["preset"] == 8 and eff["index.nbits"]["used"] == 3
    assert "14 training vectors" in eff["index.nbits"]["reason"]
    assert eff["projection.n_components"] == {"preset": 128, "used": None, "reason": eff["projection.n_components"]
                                              ["reason"]}
    assert set(eff) == {"index.nbits", "projection.n_components"}  # M = 16 divides D = 1024: kept
    assert len(reduction_warnings(stderr, "index.nbits")) == 1
    assert any("index.nbits = 8 reduced to 3" in w for w in report["warnings"])
    assert len(report["per_query"]) == 4 and 0.0 <= report["mAP"] <= 1.0
    assert report["indexed"] == 14
    # without --json the summary names the reduced parameters (index and features reused)
    spec = tmp_path / "bench" / "spec.json"
    res = CliRunner().invoke(main, ["eval", "run", "groups", "--spec", str(spec), "--preset", "paper-002-vlad16-adc16x8",
                                    "--work", str(tmp_path / "work"), "--set", "features.max_side=480"])
    assert res.exit_code == 0, res.output
    assert "reduced for this collection: " in res.stdout and "index.nbits 8 -> 3" in res.stdout
    assert "projection.n_components 128 -> dropped" in res.stdout
    # the index really uses the reduced quantiser, and says so
    folder = tmp_path / "work" / report["index_folder"].split("/")[-1]
    model = json.loads((folder / "model" / "model.json").read_text())
    assert model["effective"] == eff
    pq = load_estimator(folder / "model" / "pq.npz")
    assert (pq.M, pq.nbits) == (16, 3)
    from retrieval.app.index import Index

    idx = Index.open(folder)
    try:
        assert idx.info()["model"]["effective"] == eff
    finally:
        idx.close()
    # codes only: 16 sub-codes of one byte per image (+ the 8-byte id), plus the two .npy headers and state.json
    # 16 code bytes + 8 id bytes per image, plus a fixed kilobyte of headers (the generation's and its segment's
    # state.json, the deletion list) over the 14 images
    assert 24 <= report["bytes_per_image"] < 24 + 1000 / 14


def test_ivfadc_preset_on_14_images_reduces_lists_probes_and_bits(tmp_path, monkeypatch):
    """IVFADC 64/8192 with 16 x 8 codes: 14 // 39 = 0 -> one list, nprobe 1, nbits 3."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    report, stderr = run(tmp_path, "paper-002-ivfadc", "aggregation.n_components=16")
    eff = report["effective_parameters"]
    assert {k: (v["preset"], v["used"]) for k, v in eff.items() if k.startswith("index.")} == {
        "index.nlist": (8192, 1), "index.nprobe": (64, 1), "index.nbits": (8, 3)}
    for param in ("index.nlist", "index.nprobe", "index.nbits"):
        assert len(reduction_warnings(stderr, param)) == 1
    folder = tmp_path / "work" / report["index_folder"].split("/")[-1]
    from retrieval.search import IVFADC

    ivf = IVFADC.load(folder / "model" / "ivfadc")
    assert (ivf.nlist, ivf.nprobe, ivf.nbits, ivf.M) == (1, 1, 3, 16)
    assert len(report["per_query"]) == 4 and 0.0 <= report["mAP"] <= 1.0


def test_reductions_follow_the_rule_on_synthetic_vectors():
    """The rule itself, on the codes stage with given global vectors: nbits = floor(log2 n), nlist = largest
    power of two <= n / 39, M = largest divisor of D <= M; nothing reduced when the data suffice."""
    from retrieval.engine.code_stages import CodesStage
    from retrieval.engine.presets import load_preset

    rng = np.random.default_rng(0)

    class Encoder:   # the global vectors are given
        def aggregate(self, feats):
            return V[: len(feats)]

    def fit(n, d, **index):
        nonlocal V
        preset = load_preset("paper-002-ivfadc")
        preset["index"] = dict(preset["index"], **index)
        b = CodesStage(preset, {})
        V = rng.normal(size=(n, d)).astype(np.float32)
        b.fit(Encoder(), lambda i: i, n, np.random.default_rng(1))
        return b

    V = None

    b = fit(1000, 96, nlist=8192, nprobe=64, M=16, nbits=8)
    assert {k: v["used"] for k, v in b.effective.items()} == {"index.nlist": 16, "index.nprobe": 16}
    assert (b.ivf.nlist, b.ivf.nprobe, b.ivf.nbits) == (16, 16, 8)  # 1000 // 39 = 25 -> 16; 256 <= 1000 kept
    b = fit(300, 96, nlist=4, nprobe=2, M=10, nbits=10)
    assert {k: v["used"] for k, v in b.effective.items()} == {"index.M": 8, "index.nbits": 8}
    assert (b.ivf.nlist, b.ivf.M, b.ivf.nbits) == (4, 8, 8)
    b = fit(2000, 64, nlist=32, nprobe=4, M=8, nbits=8)
    assert b.effective == {}


def test_bow200k_on_14_images_reduces_the_vocabulary(tmp_path, monkeypatch):
    """200,000 words from ~10^4 descriptors: the vocabulary is cut to one word per 10 descriptors (approximate
    k-means above 1,000 words); the run completes and records it."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    report, stderr = run(tmp_path, "paper-002-bow200k", "features.max_side=640")
    eff = report["effective_parameters"]
    k = eff["aggregation.n_components"]
    n_desc = int(k["reason"].split()[0])
    assert k["preset"] == 200000 and k["used"] == n_desc // 10 > 1000
    assert set(eff) == {"aggregation.n_components"}  # the preset has no projection (Table II, raw)
    assert len(reduction_warnings(stderr, "aggregation.n_components")) == 1
    assert len(report["per_query"]) == 4 and 0.0 <= report["mAP"] <= 1.0
    # one dense float32 vector of `used` dimensions per image in the index state
    assert report["bytes_per_image"] >= 4 * k["used"]
