"""LocalPCA (numpy oracle, persistence), FeatureStore (keys, atomicity, float16, resume), extract_many."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.core.checks import NotFittedError
from retrieval.features import FeatureExtractor, ImageReadError, LocalFeatures
from retrieval.features.parallel import extract_many
from retrieval.features.pca import LocalPCA
from retrieval.features.store import FeatureStore, file_hash, load_features, save_features


def _data(n=500, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) * np.linspace(5, 0.1, d)) @ np.linalg.qr(rng.normal(size=(d, d)))[0] + 3.0


def test_local_pca_matches_svd_oracle():
    X = _data()
    pca = LocalPCA(4, random_state=0).fit(X)
    Xc = X - X.mean(0)
    _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    np.testing.assert_allclose(pca.explained_variance_, s[:4] ** 2 / (len(X) - 1), rtol=1e-4)
    # same subspace, same projections up to the sign convention
    Y = pca.transform(X)
    Y_ref = Xc @ Vt[:4].T
    np.testing.assert_allclose(np.abs(Y), np.abs(Y_ref), rtol=1e-3, atol=1e-3)
    assert Y.dtype == np.float32 and Y.shape == (500, 4)
    # components are orthonormal; largest |entry| positive
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(4), atol=1e-5)
    assert np.all(pca.components_[np.arange(4), np.abs(pca.components_).argmax(1)] > 0)


def test_local_pca_whiten_and_inverse_and_full_rank_roundtrip():
    X = _data()
    w = LocalPCA(3, whiten=True).fit(X)
    np.testing.assert_allclose(w.transform(X).var(0, ddof=1), 1.0, rtol=1e-3)
    full = LocalPCA(16).fit(X)
    np.testing.assert_allclose(full.inverse_transform(full.transform(X)), X, atol=1e-3)


def test_local_pca_sample_persistence_and_errors(tmp_path):
    X = _data(2000)
    a = LocalPCA(4, max_samples=300, random_state=1).fit(X)
    assert a.n_samples_seen_ == 300
    p = a.save(tmp_path / "pca")
    b = LocalPCA.load(p)
    np.testing.assert_array_equal(a.transform(X[:10]), b.transform(X[:10]))
    assert b.n_components == 4 and b.max_samples == 300
    with pytest.raises(NotFittedError):
        LocalPCA().transform(X)
    with pytest.raises(ValueError, match="n_components"):
        LocalPCA(17).fit(X[:, :16])
    with pytest.raises(ValueError, match="columns"):
        a.transform(X[:, :5])


def _feat(n=5, config=None, desc_dtype=np.uint8):
    rng = np.random.default_rng(n)
    return LocalFeatures(rng.uniform(0, 100, (n, 6)).astype(np.float32),
                         (rng.uniform(0, 200, (n, 128))).astype(desc_dtype), (120, 80),
                         config or {"detector": "hesaff", "x": 1})


def test_store_roundtrip_keys_and_float16(tmp_path):
    s = FeatureStore(tmp_path / "s")
    f = _feat()
    s.put("ab12cd", f, "key1")
    assert ("ab12cd", "key1") in s and ("ab12cd", "key2") not in s
    g = s.get("ab12cd", "key1")
    np.testing.assert_array_equal(g.frames, f.frames)
    np.testing.assert_array_equal(g.descriptors, f.descriptors)
    assert g.image_size == (120, 80) and g.config == f.config and g.descriptors.dtype == np.uint8
    assert s.get("ab12cd", "key2") is None  # another configuration never reads this entry
    s16 = FeatureStore(tmp_path / "s16", float16=True)
    ff = _feat(7, desc_dtype=np.float32)
    s16.put("0011ff", ff, "k")
    got = s16.get("0011ff", "k")
    assert got.descriptors.dtype == np.float32
    np.testing.assert_allclose(got.descriptors, ff.descriptors, rtol=1e-3)
    assert s16.entry_path("0011ff", "k").stat().st_size < s.entry_path("ab12cd", "key1").stat().st_size * 3
    with pytest.raises(ValueError, match="content_hash"):
        s.get("../etc", "k")
    # a damaged entry is reported absent (and removed), not a crash
    s.entry_path("ab12cd", "key1").write_bytes(b"garbage")
    assert s.get("ab12cd", "key1") is None and ("ab12cd", "key1") not in s


def test_save_load_features_file(tmp_path):
    f = _feat()
    save_features(tmp_path / "f.npz", f)
    g = load_features(tmp_path / "f.npz")
    np.testing.assert_array_equal(g.frames, f.frames)
    (tmp_path / "bad.npz").write_text("x")
    with pytest.raises(ValueError, match="not a features file"):
        load_features(tmp_path / "bad.npz")


def test_file_hash_content_not_name(tmp_path):
    (tmp_path / "a").write_bytes(b"hello")
    (tmp_path / "b").write_bytes(b"hello")
    (tmp_path / "c").write_bytes(b"hellO")
    assert file_hash(tmp_path / "a") == file_hash(tmp_path / "b") != file_hash(tmp_path / "c")
    assert len(file_hash(tmp_path / "a")) == 32


def _images(tmp_path, n=4):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        a = (rng.random((64 + 8 * i, 80)) * 255).astype(np.uint8)
        p = tmp_path / f"im{i}.png"
        Image.fromarray(a).resize((160, 128 + 16 * i)).save(p)
        paths.append(p)
    return paths


def test_extract_many_order_errors_store_resume(tmp_path):
    paths = _images(tmp_path)
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    inputs = [paths[0], bad, *paths[1:]]
    ex = FeatureExtractor(threshold=2.0)
    ref = [ex(p) for p in paths]
    store = FeatureStore(tmp_path / "store")
    seen = []
    out = list(extract_many(inputs, ex, workers=1, store=store, progress=lambda d, t: seen.append((d, t))))
    assert [i for i, _ in out] == list(range(5))
    assert isinstance(out[1][1], ImageReadError) and "bad.jpg" in str(out[1][1])
    for (_, got), want in zip([out[0], *out[2:]], ref, strict=True):
        np.testing.assert_array_equal(got.frames, want.frames)
    assert seen[-1] == (5, 5)
    # resume: everything readable now comes from the store (a different config would not)
    assert all((file_hash(p), ex.config_key) in store for p in paths)
    calls = []

    def counting(p):
        calls.append(p)
        return ex(p)

    counting.config_key = ex.config_key
    again = list(extract_many(inputs, counting, workers=1, store=store))
    assert calls == [bad] and len(again) == 5


def test_extract_many_with_two_processes_same_results(tmp_path):
    paths = _images(tmp_path, 3)
    ex = FeatureExtractor(threshold=2.0)
    one = [r for _, r in extract_many(paths + [tmp_path / "missing.png"], ex, workers=1)]
    two = [r for _, r in extract_many(paths + [tmp_path / "missing.png"], ex, workers=2)]
    for a, b in zip(one[:3], two[:3], strict=True):
        np.testing.assert_array_equal(a.frames, b.frames)
        np.testing.assert_array_equal(a.descriptors, b.descriptors)
    assert isinstance(two[3], ImageReadError) and "missing.png" in str(two[3])
