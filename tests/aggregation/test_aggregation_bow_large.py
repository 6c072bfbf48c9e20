"""BoW with more than 65,536 words (Jegou et al. 2012, Table II's 200k): approximate assignment through ApproximateKMeans."""

import numpy as np
import pytest

from retrieval.aggregation import BoW, KMeansVocabulary
from retrieval.aggregation.bow import EXACT_MAX_WORDS


@pytest.fixture(scope="module")
def large_bow():
    rng = np.random.default_rng(0)
    K, d = EXACT_MAX_WORDS + 4000, 8
    words = rng.standard_normal((K, d)).astype(np.float32)
    voc = KMeansVocabulary(2)
    voc.cluster_centers_ = words
    voc.sigma_ = 0.1
    bow = BoW.from_vocabulary(voc, idf=False, norm=None)
    return bow, words, rng


def test_more_than_65536_words_are_accepted_and_assigned_near_exactly(large_bow):
    bow, words, rng = large_bow
    # descriptors = words + small noise: the exact nearest word is (almost always) the generating one
    idx = rng.choice(len(words), 3000, replace=False)
    X = words[idx] + 0.01 * rng.standard_normal((3000, words.shape[1])).astype(np.float32)
    d2 = ((X[:200, None, :] - words[None, :, :]) ** 2).sum(-1)  # exact oracle on 200 of them
    exact = d2.argmin(1)
    tf = bow.term_frequencies([X[:200]]).toarray()[0]
    assert tf.sum() == 200
    agree = np.bincount(exact, minlength=len(words))
    # histogram mass on the exactly-nearest words (approximate assignment: at least 90 % agreement)
    assert np.minimum(tf, agree).sum() >= 0.9 * 200
    # the full image: one count per descriptor, words in range
    V = bow.term_frequencies([X])
    assert V.shape == (1, len(words)) and V.sum() == 3000
    assert np.count_nonzero(V.toarray()[0][idx]) >= 0.9 * 3000


def test_large_bow_save_load_gives_the_same_histograms(large_bow, tmp_path):
    bow, words, rng = large_bow
    X = words[:500] + 0.01 * rng.standard_normal((500, words.shape[1])).astype(np.float32)
    before = bow.term_frequencies([X]).toarray()
    path = bow.save(tmp_path / "bow")
    again = BoW.load(path)
    assert np.array_equal(again.term_frequencies([X]).toarray(), before)


def test_vocabulary_size_bound_is_checked():
    with pytest.raises(ValueError, match="n_clusters"):
        BoW((1 << 24) + 1)._check_params()


def test_from_an_approximate_kmeans_reuses_its_structure_and_order():
    from retrieval.aggregation.large_vocabulary import ApproximateKMeans

    rng = np.random.default_rng(1)
    words = rng.standard_normal((EXACT_MAX_WORDS + 500, 8)).astype(np.float32)
    akm = ApproximateKMeans.from_centers(words, random_state=0)
    akm.perm_ = None  # as after fit: its own cluster_centers_ order, no renumbering
    bow = BoW.from_vocabulary(akm, idf=False, norm=None)
    assert bow._akm is akm
    X = akm.cluster_centers_[:300] + 0.01 * rng.standard_normal((300, 8)).astype(np.float32)
    tf = bow.term_frequencies([X]).toarray()[0]
    # descriptors next to words 0..299 of the vocabulary's order land (>= 90 %) on those same words
    assert tf[:300].sum() >= 0.9 * 300 and tf.sum() == 300
