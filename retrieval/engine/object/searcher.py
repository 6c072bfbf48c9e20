"""Object retrieval by bounding box (Zhu et al. 2013): large-vocabulary BoW, inverted file, exact and spatial re-ranking.

Pipeline of :class:`ObjectSearcher`:

1. the query object Q is the BoW histogram of the query features whose centre lies in the box (Zhu et al. 2013
   section 2.2, "computed from the descriptors appearing in the ROI"), words from a large vocabulary
   (:class:`~retrieval.aggregation.large_vocabulary.ApproximateKMeans`), hard or soft (3 words) assignment,
   idf-weighted;
2. every database image is scored through the inverted file (:class:`~retrieval.search.invfile.InvertedFile`)
   with l1/l2 (eq. 1), delta_1 (eq. 8-9) or delta_2 (eq. 10-11);
3. the top ``shortlist`` (R = 200) are re-scored exactly, in float64, on their full histograms (with the query
   weight wbar / w of step 2, which eq. 9 / 11 define over the whole database);
4. spatial verification (Philbin et al. CVPR 2007): tentative correspondences are the feature pairs that share a
   visual word; ``retrieval.rerank.verification.verify_affine`` fits an affine transform from single affine-frame
   correspondences refined by LO-RANSAC; images are re-ranked by their number of inliers and the query box is
   projected through the transform to report the matched box in each database image;
5. optionally, average query expansion (Chum et al. ICCV 2007): the query histogram is averaged with the
   histograms of the verified images' features inside their matched boxes, and steps 2-4 are run again.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from retrieval._version import __version__
from retrieval.aggregation.large_vocabulary import ApproximateKMeans
from retrieval.core.cache import BytesLRU
from retrieval.core.checks import check_choice, check_is_fitted, check_random_state, check_scalar
from retrieval.core.persistence import FormatError, read_folder_header, save_npy_atomic, write_json_atomic
from retrieval.engine.config import METHOD_ALPHA
from retrieval.engine.hits import Hit, finish_ranking
from retrieval.engine.object.forward import ForwardEntries, forward_words_dtype
from retrieval.engine.object.scorers import AsmkScorer, BowScorer, Round
from retrieval.engine.object.scores import bow_dissimilarity, word_matches
from retrieval.engine.params import Offer, Resolved, SearchContext, SearchParams
from retrieval.features.rootsift import root_sift
from retrieval.features.types import LocalFeatures
from retrieval.rerank.boxes import project_box, query_region
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS, verify
from retrieval.rerank.verifier import Verifier
from retrieval.search import smk
from retrieval.search.invfile import METHODS as BOW_METHODS
from retrieval.search.invfile import InvertedFile, histogram_rows

logger = logging.getLogger(__name__)

__all__ = ["ObjectSearcher"]

FORMAT = "retrieval-object-searcher"
FORMAT_VERSION = 2
"""Version 2: the vocabulary may be kept by the model instead of the folder (``header["vocabulary"] == "model"``,
with its digest); version 1 folders always hold ``vocabulary.npz`` and are still read."""
RERANK = ("none", "exact", "spatial")
METHODS = (*BOW_METHODS, "asmk")
"""Scorings: the BoW dissimilarities of Zhu et al. 2013 and the aggregated selective match kernel (ASMK*, Tolias et
al. 2013, :mod:`retrieval.search.smk`; needs ``signatures=True``)."""


DEFAULT_RATIO = 0.85
"""Ratio test of the tentative matches verified with stored features (the presets' ``search.ratio``)."""
DEFAULT_VERIFY_TOP = 50
"""Images verified on the stored features when ``verify_top`` is not given (the presets' ``search.verify_top``)."""
OFFER = Offer(methods=METHODS, reranks=RERANK, alphas=METHOD_ALPHA)
"""What an object search offers (:class:`retrieval.engine.params.Offer`): the object backend's too."""
STANDALONE = SimpleNamespace(method="delta1", rerank="spatial", query_expansion=0, alpha=0.5)
"""The defaults of :meth:`ObjectSearcher.search` called on its own (an index takes its preset's)."""

def vocabulary_digest(vocabulary: ApproximateKMeans) -> str:
    """BLAKE2b (16 bytes, hex) of a vocabulary's words: names the vocabulary a searcher folder was built with."""
    centers = np.ascontiguousarray(vocabulary.cluster_centers_)
    return hashlib.blake2b(centers.view(np.uint8).ravel(), digest_size=16).hexdigest()


def _descriptors(features, rootsift):
    d = np.asarray(features.descriptors)
    if d.dtype == np.uint8 and rootsift:
        return np.ascontiguousarray(root_sift(d), dtype=np.float32)
    return np.ascontiguousarray(d, dtype=np.float32)


class ObjectSearcher:
    """Self-contained object search engine over local features (Zhu et al. 2013 + Philbin 2007/2008 + Chum 2007).

    Parameters
    ----------
    n_words : int -- vocabulary size (100k-1M for large databases)
    assignment : {"hard", "soft"} -- soft = 3 nearest words with Gaussian weights (Philbin et al. 2008)
    idf : bool -- idf weighting (Zhu et al. 2013, section 2.2)
    shortlist : int -- R, images re-ranked exactly and spatially (200)
    min_inliers : int -- an image counts as verified with at least this many inliers
    rootsift : bool -- turn uint8 SIFT into RootSIFT before assignment
    max_train_descriptors : int -- descriptors sampled for vocabulary training
    vocabulary_params : dict or None -- extra parameters of :class:`ApproximateKMeans` (n_iter, nprobe, ...)
    signatures : bool -- also store, per image and word, the binary signature of the aggregated residual
        (:class:`retrieval.search.smk.SMKFile`), for ``method="asmk"``
    query_words : int -- ``method="asmk"``: words per query descriptor (multiple assignment, Tolias et al. 2013)
    threshold : float -- ``method="asmk"``: tau of the selective function (eq. 7)
    asymmetric : bool -- ``method="asmk"``: the query residuals are not binarised (Gordo et al.)
    keep_frames : bool -- keep each feature's frame in the forward index; False (an index's segments): the
        frames are read from ``get_features`` when a search needs them (query expansion's boxes)
    random_state : None, int or Generator

    Attributes
    ----------
    vocabulary_ : ApproximateKMeans
    invfile_ : InvertedFile
    """

    def __init__(self, n_words: int = 100_000, *, assignment: str = "hard", idf: bool = True,
                 shortlist: int = 200, min_inliers: int = DEFAULT_MIN_INLIERS, rootsift: bool = True,
                 max_train_descriptors: int = 1_000_000, vocabulary_params: dict | None = None,
                 signatures: bool = False, query_words: int = 1, threshold: float = 0.0, asymmetric: bool = True,
                 keep_frames: bool = True, random_state=None):
        self.n_words = n_words
        self.assignment = assignment
        self.idf = idf
        self.shortlist = shortlist
        self.min_inliers = min_inliers
        self.rootsift = rootsift
        self.max_train_descriptors = max_train_descriptors
        self.vocabulary_params = vocabulary_params
        self.signatures = signatures
        self.query_words = query_words
        self.threshold = threshold
        self.asymmetric = asymmetric
        self.keep_frames = keep_frames
        self.random_state = random_state
        self._fwd = ForwardEntries()

    def _check_params(self):
        own = type(self).__name__
        check_scalar(self.n_words, "n_words", own, low=1)
        check_choice(self.assignment, "assignment", own, ("hard", "soft"))
        check_scalar(self.shortlist, "shortlist", own, low=1)
        check_scalar(self.min_inliers, "min_inliers", own, low=1)
        check_scalar(self.max_train_descriptors, "max_train_descriptors", own, low=1)
        check_scalar(self.query_words, "query_words", own, low=1)

    # ------------------------------------------------------------------ training and indexing
    def fit(self, features_list, y=None) -> ObjectSearcher:
        """Train the vocabulary on (a sample of) the descriptors of a list of :class:`LocalFeatures`."""
        self._check_params()
        rng = check_random_state(self.random_state)
        descs = [_descriptors(f, self.rootsift) for f in features_list]
        X = np.concatenate(descs) if descs else np.zeros((0, 128), np.float32)
        if X.shape[0] > self.max_train_descriptors:
            X = X[np.sort(rng.choice(X.shape[0], self.max_train_descriptors, replace=False))]
        if X.shape[0] < self.n_words:
            raise ValueError(f"fit needs at least n_words={self.n_words} descriptors; got {X.shape[0]}.")
        params = dict(self.vocabulary_params or {})
        self.vocabulary_ = ApproximateKMeans(self.n_words, random_state=rng, **params).fit(X)
        self.vocabulary_.random_state = None
        return self._empty_state()

    def _empty_state(self) -> ObjectSearcher:
        self.invfile_ = InvertedFile(self.n_words, idf=self.idf)
        if self.signatures:
            self.smk_ = smk.SMKFile(self.n_words, self.vocabulary_.cluster_centers_.shape[1], idf=self.idf)
        self._fwd = ForwardEntries()
        return self

    def params(self) -> dict:
        """The constructor's parameters (what :meth:`save` records)."""
        return {k: getattr(self, k) for k in ("n_words", "assignment", "idf", "shortlist", "min_inliers", "rootsift",
                                              "max_train_descriptors", "vocabulary_params", "signatures",
                                              "query_words", "threshold", "asymmetric", "keep_frames")}

    def empty_like(self) -> ObjectSearcher:
        """A searcher with this one's parameters and vocabulary (shared) and nothing indexed."""
        check_is_fitted(self, ["vocabulary_"])
        out = type(self)(**self.params())
        out.vocabulary_ = self.vocabulary_
        return out._empty_state()

    @classmethod
    def composed(cls, model: ObjectSearcher, invfile, signatures, forward) -> ObjectSearcher:
        """A searcher with ``model``'s parameters and vocabulary over an inverted file, signatures and forward index
        given from outside (the views of :mod:`retrieval.engine.object.parts`: several parts searched as one)."""
        out = model.empty_like()
        out.invfile_, out._fwd = invfile, forward
        if out.signatures:
            out.smk_ = signatures
        return out

    def assign(self, desc):
        """Words (F, r) int32 and weights (F, r) float32 of descriptors (r = 1 hard, 3 soft)."""
        if desc.shape[0] == 0:
            r = 1 if self.assignment == "hard" else 3
            return np.zeros((0, r), np.int32), np.zeros((0, r), np.float32)
        if self.assignment == "hard":
            w = self.vocabulary_.predict(desc)[:, None]
            return w.astype(np.int32), np.ones(w.shape, np.float32)
        w, wt = self.vocabulary_.soft_assign(desc, r=3)
        return w.astype(np.int32), wt.astype(np.float32)

    def add(self, ids, features_list) -> ObjectSearcher:
        """Index images: ids (n,) integers (new), features_list: n :class:`LocalFeatures`."""
        check_is_fitted(self, ["vocabulary_"])
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"ids must be a 1-d integer array; got shape {ids.shape} and dtype {ids.dtype}.")
        if len(features_list) != ids.shape[0]:
            raise ValueError(f"ids has {ids.shape[0]} entries but features_list holds {len(features_list)}.")
        signed, entries = [], {}
        for i, f in zip(ids.tolist(), features_list, strict=True):
            desc = _descriptors(f, self.rootsift)
            w, wt = self.assign(desc)
            frames = np.asarray(f.frames, np.float32) if self.keep_frames else None
            entries[int(i)] = (w, wt, frames, tuple(int(v) for v in f.image_size))
            if self.signatures:   # one word per database descriptor (its nearest), as ASMK*
                uw, V = smk.aggregate_residuals(desc, w[:, 0], self.vocabulary_.cluster_centers_)
                signed.append((uw, smk.binarize(V)))
        return self.add_encoded(ids.astype(np.int64), entries, signed)

    def add_encoded(self, ids, entries: dict, signed: list) -> ObjectSearcher:
        """Index images already encoded (a merge of parts copies them, nothing is assigned again): ``entries`` id
        -> forward entry (:meth:`forward`), ``signed`` their (words, signatures) in the order of ``ids``."""
        ids = np.asarray(ids, np.int64)
        items = [(np.asarray(entries[int(i)][0]).ravel(), np.asarray(entries[int(i)][1]).ravel()) for i in ids]
        self.invfile_.add(ids, items)   # validates ids (duplicates, already indexed)
        if self.signatures:
            self.smk_.add(ids, signed)
        self._fwd.update(entries)
        return self

    def remove(self, ids) -> int:
        """Remove images by id; returns how many were indexed."""
        check_is_fitted(self, ["vocabulary_"])
        n = self.invfile_.remove(ids)
        if self.signatures:
            self.smk_.remove(ids)
        for i in np.asarray(ids, dtype=np.int64).ravel().tolist():
            self._fwd.pop(int(i), None)
        return n

    def commit(self) -> None:
        """Merge the images added since the last commit into the inverted file (and the signatures): call once
        after adding; a committed searcher is only read by its searches."""
        self.invfile_.commit()
        if self.signatures:
            self.smk_.commit()

    def forward_entries(self) -> ForwardEntries:
        """The forward index (id -> :meth:`forward` entry)."""
        return self._fwd

    def forward(self, image_id: int):
        """The forward entry of an indexed image: (words (F, r) int32, weights (F, r) float32, frames (F, 6)
        float32, size (w, h))."""
        return self._fwd[int(image_id)]

    @property
    def ntotal(self) -> int:
        return self.invfile_.ntotal if hasattr(self, "invfile_") else 0

    # ------------------------------------------------------------------ search
    def histogram(self, words, weights):
        w, tf = histogram_rows([(np.asarray(words).ravel(), np.asarray(weights).ravel())], self.n_words)[0]
        return w, tf

    def exact(self, qw, qtf, cand, method, weight):
        """Exact float64 dissimilarities (Zhu et al. 2013, eq. 1, 8, 10) between Q and the full histograms of cand."""
        idf = self.invfile_.idf_
        out = np.empty(len(cand), dtype=np.float64)
        for n, i in enumerate(cand):
            words, weights, _, _ = self._fwd[int(i)]
            tw, ttf = self.histogram(words, weights)
            out[n] = bow_dissimilarity(qw, qtf, tw, ttf, idf, method, weight)   # ttf as stored in the postings
        return out

    def verifier(self, ratio: float = DEFAULT_RATIO, cells=None, query_features: int = 0) -> Verifier:
        """The verification of this searcher's spatial re-ranking with stored features: RootSIFT (or the raw
        descriptors, ``rootsift=False``) ratio-test matches, ``min_inliers`` one-to-one inliers; ``cells``: the
        model's :class:`~retrieval.rerank.cells.MatchCells` (None: the exact ratio test)."""
        return Verifier(ratio=ratio, min_inliers=self.min_inliers,
                        describe=None if self.rootsift else (lambda d: np.asarray(d, np.float32)), cells=cells,
                        query_features=query_features)

    def _word_outcome(self, rnd: Round, i: int):
        """Verification of database image ``i`` on visual-word correspondences (no stored features): ``(inliers,
        box)`` when verified, else None. The decision and the box follow :class:`Verifier`."""
        q_frames, _, q_words = rnd.q
        words, _, frames, size = self._fwd[int(i)]
        if frames is None:
            raise ValueError("this searcher keeps no frames (keep_frames=False): verify with the stored features "
                             "(get_features).")
        matches = word_matches(q_words, words[:, 0])
        if matches.shape[0] < 3:
            return None
        v = verify(q_frames, frames, matches, min_inliers=self.min_inliers)
        box = project_box(rnd.box, v.transform, size) if v.verified else None
        return None if box is None else (int(v.inliers), box)

    def search(self, query_features, *, bbox=None, k: int = 10, method: str = "delta1", alpha: float = 0.5,
               rerank: str = "spatial", get_features=None, query_expansion: bool = False,
               exclude=None, verify_top: int | None = None, verifier: Verifier | None = None,
               cache: BytesLRU | None = None, threads: int = 1) -> list[Hit]:
        """Search the object in ``bbox`` (x1, y1, x2, y2, original pixels; None = whole image).

        Parameters
        ----------
        query_features : LocalFeatures of the query image (frames in original pixels)
        bbox : str or 4 numbers or None
        k : int -- number of hits
        method : {"l1", "l2", "delta1", "delta2", "asmk"}
        alpha : float -- alpha_1 (eq. 9) or alpha_2 (eq. 11), or the selectivity exponent of ASMK*
        rerank : {"none", "exact", "spatial"}
        get_features : callable(id) -> LocalFeatures or None -- the stored features verified (RootSIFT ratio-test
            matches, :meth:`verifier`); None: the visual-word correspondences of the forward index
        query_expansion : int or bool -- average query expansion from this many verified images (True: 10,
            False or 0: off; needs rerank="spatial")
        exclude : iterable of ids or None -- ids never returned (e.g. the query image itself)
        verify_top : int or None -- with the stored features, the first results verified (None: 50,
            ``DEFAULT_VERIFY_TOP``)
        verifier : Verifier or None -- the verification with stored features (None: :meth:`verifier`)
        cache : BytesLRU or None -- keeps described database images by id across searches
        threads : int -- images verified side by side (the outcome does not depend on it)

        Returns
        -------
        list of :class:`retrieval.engine.hits.Hit`, best first, ordered by
        :func:`retrieval.engine.hits.finish_ranking` (verified images by decreasing inliers, then the rest by
        similarity). ``distance`` is the dissimilarity (smaller is better; ``1 - K`` for asmk), ``similarity`` the
        score relative to that of the query photo's own encoding, in [0, 1] (1 for the query photo;
        :mod:`retrieval.engine.object.scorers`), ``score`` the ranking key; ``verified`` (and ``inliers``, ``box``) only
        with ``rerank="spatial"``. The searcher is only read: any number of threads may search it at once.
        """
        check_is_fitted(self, ["vocabulary_"])
        n_qe = 10 if query_expansion is True else (query_expansion or 0)
        params = SearchParams(k=k, method=method, rerank=rerank, query_expansion=n_qe, alpha=alpha).resolve(
            OFFER, STANDALONE)
        features, box = query_region(query_features, bbox)
        context = SearchContext(get_features, cache, int(threads))
        return self.run(features, box, params, context, verifier=verifier or self.verifier(),
                        n_verify=DEFAULT_VERIFY_TOP if verify_top is None else int(verify_top), exclude=exclude)

    def run(self, features, box, params: Resolved, context: SearchContext, *, verifier: Verifier, n_verify: int,
            exclude=None) -> list[Hit]:
        """The search of :meth:`search` for the query's ``features`` already selected in its region ``box``
        (:func:`retrieval.rerank.boxes.query_region`, or an index's :class:`~retrieval.app.query.Query`) and
        ``params`` already checked (:meth:`~retrieval.engine.params.SearchParams.resolve`): the object backend's
        entry; ``n_verify`` the first results verified with ``context.get_features``."""
        q_frames = np.asarray(features.frames, np.float32)
        q_desc = _descriptors(features, self.rootsift)
        excl = set() if exclude is None else {int(v) for v in np.asarray(list(exclude)).ravel()}
        rnd = Round(q=(q_frames, q_desc, None), box=tuple(box), k=params.k, rerank=params.rerank,
                    get_features=context.get_features, exclude=excl, n_verify=int(n_verify), verifier=verifier,
                    described=verifier.query_side(LocalFeatures(q_frames, q_desc, features.image_size)),
                    cache=context.cache, threads=int(context.threads))
        if params.method == "asmk":
            return AsmkScorer(self, params.alpha).search(rnd, q_desc, params.query_expansion)
        return BowScorer(self, params.method, params.alpha).search(rnd, q_desc, params.query_expansion)

    def verified(self, hits, rnd: Round):
        """Spatial verification of ``hits`` (best first) and the final order (:func:`finish_ranking`).

        ``rnd.checked`` (id -> (inliers, box) or None, filled in place) holds the outcomes of an earlier round of
        the same query: the query side is the same, so an image verified (or rejected) once is not matched again."""
        # with the stored features (RootSIFT ratio-test matches, costlier than word matches) the first ``n_verify``
        # images after exact re-ranking are verified (the preset's search.verify_top)
        head = hits[:rnd.n_verify] if rnd.get_features is not None else hits
        todo = [h.id for h in head if h.id not in rnd.checked]
        if rnd.get_features is not None:
            outcomes = rnd.verifier.check_many(rnd.described, todo, rnd.box, rnd.get_features, cache=rnd.cache,
                                               threads=rnd.threads)
            for i, o in zip(todo, outcomes, strict=True):
                rnd.checked[i] = (o.inliers, o.box) if o.verified else None
        else:
            for i in todo:
                rnd.checked[i] = self._word_outcome(rnd, i)
        for hit in head:
            if rnd.checked[hit.id] is not None:
                hit.verified = True
                hit.inliers, hit.box = rnd.checked[hit.id]
        if rnd.first is not None:   # the expanded query's round: a verified hit's similarity is to the query photo
            ver = [h for h in head if h.verified]
            for hit, sim in zip(ver, rnd.first([h.id for h in ver]) if ver else [], strict=True):
                hit.similarity = float(sim)
        hits = finish_ranking(hits, reranked=True)
        verified = [h for h in hits if h.verified and h.box is not None]
        return hits[:rnd.k], verified


    # ------------------------------------------------------------------ persistence
    def save(self, folder, *, with_vocabulary: bool = True) -> Path:
        """Folder: ``header.json``, ``vocabulary.npz``, ``invfile/``, ``signatures/`` (with ``signatures=True``),
        forward arrays (``fwd_*.npy``). ``with_vocabulary=False``: the vocabulary is left to the model that
        trained it (an index's generations: it is stored once per model, not per generation); the header keeps its
        digest and :meth:`load` then needs it."""
        check_is_fitted(self, ["vocabulary_"])
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if with_vocabulary:
            self.vocabulary_.save(folder / "vocabulary.npz")
        self.invfile_.save(folder / "invfile", postings=not self.signatures)   # asmk's postings: the signatures
        if self.signatures:
            self.smk_.save(folder / "signatures")
        order = [int(i) for i in self.invfile_.ids_.tolist()]
        r = 1 if self.assignment == "hard" else 3
        counts = np.array([self._fwd[i][0].shape[0] for i in order], dtype=np.int64)
        indptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])

        def cat(j, shape, dt):
            return np.concatenate([self._fwd[i][j] for i in order]).astype(dt) if order else np.zeros(shape, dt)

        save_npy_atomic(folder / "fwd_ids.npy", np.asarray(order, dtype=np.int64))
        save_npy_atomic(folder / "fwd_indptr.npy", indptr)
        save_npy_atomic(folder / "fwd_words.npy", cat(0, (0, r), forward_words_dtype(self.n_words)))
        if self.assignment != "hard":   # hard assignment: every weight is 1, not stored
            save_npy_atomic(folder / "fwd_weights.npy", cat(1, (0, r), np.float32))
        if self.keep_frames:
            save_npy_atomic(folder / "fwd_frames.npy", cat(2, (0, 6), np.float32))
        save_npy_atomic(folder / "fwd_sizes.npy", np.array([self._fwd[i][3] for i in order], np.int64).reshape(-1, 2))
        params = self.params()
        header = {"format": FORMAT, "format_version": FORMAT_VERSION,
                  "class": "retrieval.engine.object.searcher.ObjectSearcher", "library_version": __version__,
                  "params": params, "ntotal": len(order),
                  "vocabulary": "vocabulary.npz" if with_vocabulary else "model",
                  "vocabulary_digest": vocabulary_digest(self.vocabulary_)}
        write_json_atomic(folder / "header.json", header)
        return folder

    @classmethod
    def load(cls, folder, *, mmap: bool = True, vocabulary: ApproximateKMeans | None = None,
             digest: str | None = None) -> ObjectSearcher:
        """Open a folder written by :meth:`save` (postings and forward arrays memory-mapped when ``mmap``).
        ``vocabulary``: the model's, for a folder saved without its own (``with_vocabulary=False``); it must be
        the one the folder was built with (its digest is checked; ``digest``: :func:`vocabulary_digest` of
        ``vocabulary`` when the caller has it, so that opening several segments hashes it once)."""
        folder = Path(folder)
        try:
            header = read_folder_header(folder, FORMAT, FORMAT_VERSION, "object searcher")
        except FormatError:
            header = read_folder_header(folder, FORMAT, 1, "object searcher")   # always holds its vocabulary
        obj = cls(**header["params"])
        if header.get("vocabulary", "vocabulary.npz") != "model":
            obj.vocabulary_ = ApproximateKMeans.load(folder / "vocabulary.npz")
        elif vocabulary is None:
            raise FormatError(f"{folder}: the vocabulary is kept by the index's model; open this searcher with it.")
        elif (digest or vocabulary_digest(vocabulary)) != header.get("vocabulary_digest"):
            raise FormatError(f"{folder}: built with another vocabulary than the model's (digest "
                              f"{header.get('vocabulary_digest')!r}, the model's "
                              f"{digest or vocabulary_digest(vocabulary)!r}).")
        else:
            obj.vocabulary_ = vocabulary
        obj.invfile_ = InvertedFile.load(folder / "invfile", mmap=mmap, postings=obj._forward_postings)
        if obj.signatures:
            obj.smk_ = smk.SMKFile.load(folder / "signatures", mmap=mmap)
        mode = "r" if mmap else None
        ld = {n: np.load(folder / f"fwd_{n}.npy", mmap_mode=mode, allow_pickle=False)
              for n in ("ids", "indptr", "words", "weights", "frames", "sizes")
              if n in ("ids", "indptr", "words", "sizes") or (folder / f"fwd_{n}.npy").exists()}
        obj._fwd = ForwardEntries(ld)
        return obj

    def _forward_postings(self):
        """The inverted file's postings ``(indptr, postings_ids, postings_tf)`` from the forward index, for a searcher
        saved without them (with signatures, whose kernel never reads them: only the BoW methods, ``--scoring delta1``
        and the others, do): the histograms of the indexed images in the inverted file's order, merged as
        :meth:`InvertedFile.commit` merges them (the same arrays as a saved copy)."""
        ids = np.asarray(self.invfile_.ids_, np.int64)
        inv = InvertedFile(self.n_words, idf=False)
        entries = [self._fwd[int(i)] for i in ids.tolist()]
        inv.add(ids, [(np.asarray(e[0]).ravel(), np.asarray(e[1]).ravel()) for e in entries])
        inv.commit()
        return inv.indptr_, inv.postings_ids_, inv.postings_tf_
