"""Verification on evidence (retrieval.rerank.evidence): the signatures are those of the paper's rule, the
correspondences are exactly those of a brute-force reading of the rule, an image's evidence survives the store and
the model its save, and the verifier on evidence verifies the homogr pairs and none of a sample of unrelated real
pairs, as the verifier on descriptors does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import shared_path

from retrieval.features import root_sift
from retrieval.features.store import FeatureStore
from retrieval.rerank.evidence import Evidence, EvidenceModel, QueryEvidence, evidence_matches
from retrieval.rerank.verifier import Verifier

HOMOGR = ["adam", "boat", "BruggeTower", "LePoint1", "graf", "Eiffel"]


def toy_model(seed=0, n_words=40, d=64, bits=64):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_words, d)).astype(np.float32) * 3
    X = (centres[rng.integers(0, n_words, 4000)] + rng.normal(size=(4000, d))).astype(np.float32)
    return EvidenceModel.learn(X, n_words=n_words, bits=bits, n_iter=4, random_state=seed), X


# ------------------------------------------------------------------------------------------- the signatures
@pytest.mark.parametrize("bits", [32, 64])
def test_signature_bits_are_the_projection_above_the_words_median(bits):
    model, X = toy_model(bits=bits)
    words = model.vocabulary.predict(X[:200])
    sig = model.signatures(X[:200], words)
    assert sig.dtype == (np.uint32 if bits == 32 else np.uint64)
    proj = X[:200] @ model.projection.T
    for i in range(200):
        expected = sum(1 << b for b in range(bits) if proj[i, b] > model.medians[words[i], b])
        assert int(sig[i]) == expected


def test_medians_split_each_words_training_descriptors_in_halves():
    model, X = toy_model()
    words = model.vocabulary.predict(X)
    proj = X @ model.projection.T
    big = [w for w in range(model.n_words) if (words == w).sum() >= 40]
    assert big
    for w in big:
        above = (proj[words == w] > model.medians[w]).mean(axis=0)
        assert np.all(np.abs(above - 0.5) <= 0.1)


def test_projection_rows_are_orthonormal():
    model, _ = toy_model()
    P = model.projection.astype(np.float64)
    assert np.allclose(P @ P.T, np.eye(P.shape[0]), atol=1e-5)


# ------------------------------------------------------------------------------------------- the correspondences
def brute_force(query: QueryEvidence, db: Evidence, max_distance, ratio, mutual):
    """The rule of evidence_matches read literally, pair by pair."""
    cands = {}
    for i in range(query.words.shape[0]):
        for a in range(query.words.shape[1]):
            w = query.words[i, a]
            if w < 0:
                continue
            for j in range(len(db)):
                if db.words[j] == w:
                    d = bin(int(query.signatures[i, a]) ^ int(db.signatures[j])).count("1")
                    cands.setdefault(i, []).append((d, j))
    kept = {}
    for i, c in cands.items():
        c.sort()
        d1, j1 = c[0]
        if d1 > max_distance:
            continue
        if ratio > 0 and len(c) > 1 and not d1 <= ratio * c[1][0]:
            continue
        kept[i] = (d1, j1)
    if mutual:
        best = {}
        for i, (d, j) in sorted(kept.items()):
            if j not in best or (d, i) < best[j]:
                best[j] = (d, i)
        kept = {i: (d, j) for j, (d, i) in best.items()}
    return sorted((i, j, d) for i, (d, j) in kept.items())


@pytest.mark.parametrize("seed,multiple,max_distance,ratio,mutual",
                         [(s, m, h, r, mu) for s, (m, h, r, mu) in enumerate(itertools.product(
                             (1, 3), (20, 32), (0.0, 0.8), (False, True)))])
def test_correspondences_are_the_rules(seed, multiple, max_distance, ratio, mutual):
    model, X = toy_model(seed % 3)
    rng = np.random.default_rng(seed)
    a = X[rng.choice(len(X), 120, replace=False)]
    b = np.concatenate([a[:60] + 0.3 * rng.normal(size=(60, a.shape[1])), X[rng.choice(len(X), 80)]]).astype(np.float32)
    frames = np.tile([[10, 10, 2, 0, 0, 2]], (len(b), 1)).astype(np.float32)
    db = model.database(b, frames, (100, 100))
    q = model.query(a, np.tile([[10, 10, 2, 0, 0, 2]], (len(a), 1)).astype(np.float32), multiple)
    m, dist = evidence_matches(q, db, max_distance, ratio=ratio, mutual=mutual)
    got = sorted((int(i), int(j), int(d)) for (i, j), d in zip(m, dist, strict=True))
    assert got == brute_force(q, db, max_distance, ratio, mutual)
    assert len(got) > 0


def test_an_image_against_its_own_evidence_matches_every_feature_to_itself():
    model, X = toy_model()
    a = X[:150]
    frames = np.random.default_rng(0).uniform(0, 99, (150, 6)).astype(np.float32)
    db = model.database(a, frames, (100, 100))
    q = model.query(a, frames, 1)
    m, dist = evidence_matches(q, db, 0, mutual=False)
    order = np.argsort(model.vocabulary.predict(a), kind="stable")   # the evidence keeps its features in word order
    assert len(m) == 150 and np.all(dist == 0)
    assert np.array_equal(order[m[:, 1]], m[:, 0])


# ------------------------------------------------------------------------------------------- stored and saved
def test_evidence_survives_the_store_and_a_damaged_entry_is_removed(tmp_path):
    model, X = toy_model()
    frames = np.random.default_rng(1).uniform(0, 480, (100, 6)).astype(np.float32)
    ev = model.database(X[:100], frames, (641, 481))
    store = FeatureStore(tmp_path)
    h, key = "ab" * 16, "cfg0"
    store.put_evidence(h, key, model.key, ev.arrays())
    back = store.get_evidence(h, key, model.key, ("words", "signatures", "centres", "shapes"))
    got = Evidence.from_arrays(back)
    for name in ("words", "signatures", "centres", "shapes"):
        assert np.array_equal(getattr(got, name), getattr(ev, name))
    assert got.image_size == (641, 481)
    assert np.abs(got.frames[:, :2] - frames[np.argsort(model.vocabulary.predict(X[:100]), kind="stable"), :2]).max() \
        < 641 / 65535 + 1e-3
    assert store.get_evidence(h, key, "0" * 16, ("words",)) is None   # another model's evidence is never read
    path = store.evidence_path(h, key, model.key)
    path.write_bytes(path.read_bytes()[:200])
    assert store.get_evidence(h, key, model.key, ("words",)) is None
    assert not path.exists()


def test_a_saved_model_loads_with_the_same_arrays_and_key(tmp_path):
    model, X = toy_model()
    model.save(tmp_path)
    back = EvidenceModel.load(tmp_path)
    assert back.key == model.key
    assert np.array_equal(back.medians, model.medians) and np.array_equal(back.projection, model.projection)
    w = model.vocabulary.predict(X[:300])
    assert np.array_equal(back.vocabulary.predict(X[:300]), w)
    assert np.array_equal(back.signatures(X[:300], w), model.signatures(X[:300], w))


# ------------------------------------------------------------------------------------------- real pairs
@pytest.fixture(scope="module")
def homogr_model(features_of):
    """The evidence model as the verifier is calibrated for it (20,000 words, 64 bits), learnt on the 805 Holidays
    photos and the homogr pairs; the pairs; 40 Holidays photos with their groups."""
    d = shared_path("homogr")
    pairs = []
    for name in HOMOGR:
        a, b = (next(d.glob(f"{name}{s}.*")) for s in "AB")
        pairs.append((features_of(a, detector="hesaff", max_side=1024), features_of(b, detector="hesaff",
                                                                                    max_side=1024)))
    paths = sorted(shared_path("real", "holidays805", "jpg").glob("*.jpg"))
    holidays = [features_of(p, detector="hesaff", max_side=1024) for p in paths]
    X = np.concatenate([root_sift(f.descriptors) for f in [*holidays, *(g for p in pairs for g in p)]]
                       ).astype(np.float32)
    model = EvidenceModel.learn(X, n_words=20_000, bits=64, random_state=0)
    others = [(holidays[i], paths[i].name[:4]) for i in range(0, 800, 20)]   # (features, Holidays group)
    return model, pairs, others


def whole(f):
    w, h = f.image_size
    return (0.0, 0.0, float(w - 1), float(h - 1))


def evidence_of(model, f):
    return model.database(root_sift(f.descriptors).astype(np.float32), f.frames, f.image_size)


def test_the_verifier_on_evidence_verifies_the_homogr_pairs_as_on_descriptors(homogr_model):
    model, pairs, _ = homogr_model
    on_evidence = Verifier(evidence=model)
    on_descriptors = Verifier()
    for name, (a, b) in zip(HOMOGR, pairs, strict=True):
        ev = evidence_of(model, b)
        o_desc = on_descriptors.check_many(on_descriptors.query_side(a), [0], whole(a), lambda _, b=b: b)[0]
        o_ev = on_evidence.check_many(on_evidence.query_side(a), [0], whole(a), lambda _, ev=ev: ev)[0]
        if o_desc.verified:
            assert o_ev.verified, name
        assert o_ev.matches[:, 0].max(initial=-1) < len(a)   # indices into the query's own features, all of them


def test_the_verifier_on_evidence_verifies_no_unrelated_holidays_pair(homogr_model):
    model, _, others = homogr_model
    v = Verifier(evidence=model)
    evs = [evidence_of(model, f) for f, _ in others]
    checked = 0
    for f, group in others:
        q = v.query_side(f)
        ids = [j for j in range(len(others)) if others[j][1] != group]
        outcomes = v.check_many(q, ids, whole(f), lambda j: evs[j])
        assert not any(o.verified for o in outcomes)
        checked += len(ids)
    assert checked > 300


def test_a_photo_verifies_against_its_own_evidence_with_most_features(homogr_model):
    model, pairs, _ = homogr_model
    a = pairs[0][0]
    v = Verifier(evidence=model)
    o = v.check_many(v.query_side(a), [0], whole(a), lambda _: evidence_of(model, a))[0]
    assert o.verified and o.inliers >= 0.5 * len(a)
