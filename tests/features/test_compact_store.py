"""The compact form of stored features (retrieval.features.compact, FeatureStore's compact entries): the codec's
round trip and bounds, the store's two forms, its codebook (learnt once, named by digest, shared by two writers),
and damaged files."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from retrieval.features import compact
from retrieval.features.compact import DescriptorCodebook, pack_frames, unpack_frames
from retrieval.features.store import COMPACT_FORMAT_VERSION, FeatureStore
from retrieval.features.types import LocalFeatures

KEY = "k1"


def sift_like(rng, n, centres):
    """uint8 descriptors around a few centres (what a codebook can learn), like SIFT in range and type."""
    base = centres[rng.integers(0, len(centres), n)]
    return np.clip(base + rng.normal(0, 3, (n, 128)), 0, 255).astype(np.uint8)


def photo(rng, n, centres, size=(1024, 768)):
    w, h = size
    frames = np.c_[rng.uniform(0, w - 1, n), rng.uniform(0, h - 1, n), rng.normal(0, 8, (n, 4))].astype(np.float32)
    return LocalFeatures(frames, sift_like(rng, n, centres), size, {"detector": "test"})


@pytest.fixture
def centres():
    return np.random.default_rng(1).uniform(0, 120, (40, 128))


@pytest.fixture
def filled(tmp_path, centres, monkeypatch):
    """A store with 6 photos of 600 features in full (3,600 descriptors; the minimum lowered to 2,000)."""
    monkeypatch.setattr(compact, "MIN_TRAINING_DESCRIPTORS", 2000)
    rng = np.random.default_rng(0)
    store = FeatureStore(tmp_path / "store")
    feats = {f"{i:032x}": photo(rng, 600, centres) for i in range(6)}
    for h, f in feats.items():
        store.put(h, f, KEY)
    return store, feats


def test_frames_round_trip_within_the_fixed_point_step_and_float16():
    rng = np.random.default_rng(0)
    w, h = 4000, 3000
    frames = np.c_[rng.uniform(0, w - 1, 500), rng.uniform(0, h - 1, 500),
                   rng.uniform(-200, 200, (500, 4))].astype(np.float32)
    frames[:2, :2] = [[0, 0], [w - 1, h - 1]]     # the corners are exact
    xy, shape = pack_frames(frames, (w, h))
    assert xy.dtype == np.uint16 and shape.dtype == np.float16
    back = unpack_frames(xy, shape, (w, h))
    step = np.array([(w - 1) / 65535, (h - 1) / 65535])
    assert np.all(np.abs(back[:, :2] - frames[:, :2]) <= step / 2 + 1e-3)
    np.testing.assert_allclose(back[:2, :2], frames[:2, :2], atol=1e-3)
    np.testing.assert_allclose(back[:, 2:], frames[:, 2:], rtol=1e-3, atol=1e-4)


def test_codebook_reconstructs_its_own_centroids_exactly_and_learnt_data_closely(centres):
    rng = np.random.default_rng(2)
    X = sift_like(rng, 5000, centres)
    book = DescriptorCodebook.learn(X, M=16, seed=0)
    assert book.centroids.shape == (16, 256, 8) and book.M == 16 and book.dim == 128
    codes = book.encode(X)
    assert codes.shape == (5000, 16) and codes.dtype == np.uint8
    err = np.abs(book.decode(codes).astype(float) - X).mean()
    assert err < 2.5          # noise of sigma 3 around 40 centres: a 16-byte code keeps most of it
    exact = np.clip(np.rint(book.centroids[np.arange(16), codes[0]].reshape(128)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(book.encode(exact[None])[0], codes[0])   # a decoded code encodes to itself
    np.testing.assert_array_equal(book.decode(codes[:1])[0], exact)
    again = DescriptorCodebook.from_bytes(book.to_bytes())
    assert again.digest == book.digest
    moved = DescriptorCodebook(book.centroids + np.float32(1e-3))
    assert moved.digest != book.digest


def test_codebook_refuses_bad_input_with_one_line():
    with pytest.raises(ValueError, match="at least 256 descriptors"):
        DescriptorCodebook.learn(np.zeros((100, 128), np.uint8))
    with pytest.raises(ValueError, match="not a descriptor codebook"):
        DescriptorCodebook.from_bytes(b"garbage", "cb.npy")
    with pytest.raises(ValueError, match="codes must be uint8"):
        DescriptorCodebook(np.zeros((16, 256, 8), np.float32)).decode(np.zeros((3, 8), np.uint8))


def test_store_keeps_both_forms_and_verification_reads_the_compact_one(filled):
    store, feats = filled
    assert store.codebook(KEY) is None
    assert store.compact_entries(KEY, list(feats)) == 6
    book = store.codebook(KEY)
    assert book is not None and (store.folder / KEY / "codebooks" / f"{book.digest}.npy").is_file()
    for h, f in feats.items():
        full = store.get(h, KEY)
        np.testing.assert_array_equal(full.descriptors, f.descriptors)      # encoders: the exact features
        c = store.get(h, KEY, prefer="compact")
        np.testing.assert_array_equal(c.descriptors, book.decode(book.encode(f.descriptors)))
        assert c.image_size == f.image_size and c.config == f.config
        np.testing.assert_allclose(c.frames, f.frames, rtol=1e-3, atol=0.02)
        header = json.loads(bytes(np.load(store.compact_path(h, KEY))["__header__"]).decode())
        assert header["format_version"] == COMPACT_FORMAT_VERSION and header["codebook"] == book.digest
    h0 = next(iter(feats))
    n = len(feats[h0])     # 28 bytes a feature and the archive's headers, against 152 bytes a feature
    assert store.entry_bytes(h0, KEY) <= 28 * n + 2048 and store.entry_bytes(h0, KEY, "full") >= 152 * n
    assert store.compact_entries(KEY, list(feats)) == 0      # nothing left to write


def test_dropping_the_full_form_leaves_the_compact_one_for_every_reader(filled):
    store, feats = filled
    store.compact_entries(KEY, list(feats))
    h0, h1 = list(feats)[:2]
    assert store.drop_full(KEY, [h0]) == 1
    assert not store.has_full(h0, KEY) and (h0, KEY) in store and store.has_full(h1, KEY)
    np.testing.assert_array_equal(store.get(h0, KEY).descriptors, store.get(h0, KEY, prefer="compact").descriptors)
    assert store.drop_full(KEY, [h0]) == 0
    store.compact_path(h1, KEY).unlink()
    assert store.drop_full(KEY, [h1]) == 0          # never the only form of a photo
    assert store.has_full(h1, KEY)


def test_too_few_descriptors_keep_the_full_form(tmp_path, centres):
    store = FeatureStore(tmp_path / "s")
    rng = np.random.default_rng(0)
    store.put("ab" * 16, photo(rng, 300, centres), KEY)
    assert store.compact_entries(KEY, ["ab" * 16]) == 0
    assert store.codebook(KEY) is None and not store.compact_path("ab" * 16, KEY).exists()


def test_the_first_codebook_named_stays_the_stores(filled):
    store, feats = filled
    hashes = list(feats)
    first = store.learn_codebook(KEY, hashes[:4])
    other = FeatureStore(store.folder)   # another writer, learning from other photos
    assert other.learn_codebook(KEY, hashes[4:]).digest == first.digest
    assert FeatureStore(store.folder).codebook(KEY).digest == first.digest


def test_damaged_compact_entry_and_codebook_are_named_and_reported_absent(filled, caplog):
    store, feats = filled
    store.compact_entries(KEY, list(feats))
    h0, h1 = list(feats)[:2]
    store.drop_full(KEY, [h0, h1])
    store.compact_path(h0, KEY).write_bytes(b"not an npz")
    with caplog.at_level(logging.WARNING):
        assert store.get(h0, KEY, prefer="compact") is None
    assert "corrupt feature-store entry" in caplog.text and not store.compact_path(h0, KEY).exists()
    book = store.codebook(KEY)
    path = store.folder / KEY / "codebooks" / f"{book.digest}.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = FeatureStore(store.folder)     # reads the codebook file again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert fresh.get(h1, KEY) is None
    assert "damaged" in caplog.text and fresh.compact_path(h1, KEY).exists()   # kept: the codebook may come back


def test_benchmarks_verify_against_what_the_store_returns(filled):
    """``as_stored`` (what ``retrieval bench verify --compact-features`` verifies against) equals the store's read."""
    store, feats = filled
    store.compact_entries(KEY, list(feats))
    book = store.codebook(KEY)
    for h, f in feats.items():
        got, want = compact.as_stored(f, book), store.get(h, KEY, prefer="compact")
        np.testing.assert_array_equal(got.descriptors, want.descriptors)
        np.testing.assert_array_equal(got.frames, want.frames)
