"""Aggregated selective match kernel with binary signatures (ASMK*, Tolias, Avrithis and Jegou, ICCV 2013) scored
through an inverted file, with an asymmetric (non-binarised) query side (Gordo et al.).

An image X is described, per visual word c it contains, by the aggregated residual of its descriptors assigned to c
(Tolias et al. 2013, eq. 13-14):

    V(X_c) = sum_{x in X_c} (x - q(x)),   Vhat(X_c) = V(X_c) / ||V(X_c)||,

binarised for storage (ASMK*, Sec. 3.3: b(x)_i = +1 if x_i > 0, -1 otherwise; ``d / 8`` bytes per word and image).
Two images are compared word by word with the selective function of their signatures (eq. 7):

    K(X, Y) = gamma(X) gamma(Y) sum_{c in X and Y} w_c sigma_alpha(u(X_c, Y_c)),
    sigma_alpha(u) = sign(u) |u|^alpha if u > tau, 0 otherwise,

with u the normalised Hamming similarity ``1 - 2 h / d`` of two signatures (ASMK*, eq. 15), w_c = idf_c (or 1),
and gamma the self-similarity normalisation (eq. 6): for binary signatures u(X_c, X_c) = 1, so
``gamma(X) = (sum_{c in X} w_c)^(-1/2)``.

Asymmetric query (``asymmetric=True``): the query residual is not binarised. Its similarity to a signature s in
{-1, +1}^d is ``u = <v, s> / ||v||_1`` (v the query's aggregated residual), which is 1 when s = sign(v) -- the
symmetric case's maximum -- and otherwise weighs each disagreeing bit by the query's confidence |v_i| instead of
counting it as a whole bit: the asymmetric inner product of Gordo et al. (query real, database binary). It is
computed from the packed bits with one table of 256 partial sums per byte of the query (the look-up-table
technique of asymmetric distance computation, Jegou et al. 2011).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from retrieval.core.persistence import FormatError, read_folder_header, save_npy_atomic, write_json_atomic
from retrieval.search.dissimilarities import idf_weights
from retrieval.search.postings import live_counts, row_mass

__all__ = ["SMKFile", "aggregate_residuals", "binarize", "expand_query", "selective", "signature_vectors"]

FORMAT = "retrieval-smk-file"
FORMAT_VERSION = 1


def aggregate_residuals(X, words, centers):
    """Per-word aggregated, L2-normalised residuals of one image (Tolias et al. 2013, eq. 13-14).

    Parameters
    ----------
    X : ndarray of shape (n, d) -- descriptors
    words : ndarray of shape (n,) or (n, m) int -- word of each descriptor (m words each: multiple assignment;
        negative entries are ignored)
    centers : ndarray of shape (K, d) -- the vocabulary

    Returns
    -------
    uw : ndarray of shape (u,), int64 -- sorted distinct words
    V : ndarray of shape (u, d), float32 -- unit-norm aggregated residual of each word (words whose residuals
        sum to zero are dropped)
    """
    X = np.asarray(X, np.float32)
    words = np.asarray(words, np.int64)
    if words.ndim == 1:
        words = words[:, None]
    d = centers.shape[1]
    rows = np.repeat(np.arange(X.shape[0]), words.shape[1])
    flat = words.ravel()
    keep = flat >= 0
    rows, flat = rows[keep], flat[keep]
    if flat.size == 0:
        return np.zeros(0, np.int64), np.zeros((0, d), np.float32)
    order = np.argsort(flat, kind="stable")
    flat, rows = flat[order], rows[order]
    R = X[rows] - centers[flat]
    starts = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    V = np.add.reduceat(R, starts, axis=0)
    uw = flat[starts]
    n = np.linalg.norm(V, axis=1)
    ok = n > 1e-12
    return uw[ok], (V[ok] / n[ok, None]).astype(np.float32)


def binarize(V) -> np.ndarray:
    """Signatures of aggregated residuals (ASMK*, Sec. 3.3): bit i is 1 when V[:, i] > 0; (u, d) -> (u, d/8) uint8
    (``np.packbits`` order: the first component in the most significant bit)."""
    V = np.asarray(V)
    if V.shape[1] % 8:
        raise ValueError(f"binary signatures need a descriptor dimension divisible by 8; got {V.shape[1]}.")
    return np.packbits(V > 0, axis=1)


def selective(u, alpha: float, threshold: float):
    """The selective function sigma_alpha (Tolias et al. 2013, eq. 7): ``sign(u)|u|^alpha`` above ``threshold``,
    0 otherwise."""
    u = np.asarray(u, np.float64)
    return np.where(u > threshold, np.sign(u) * np.abs(u) ** alpha, 0.0)


@njit(cache=True)
def _popcount8():
    t = np.zeros(256, np.int64)
    for b in range(256):
        c, x = 0, b
        while x:
            c += x & 1
            x >>= 1
        t[b] = c
    return t


@njit(cache=True)
def _postings_of_row(indptr, rows, words, row, out):
    """out[j] = the posting of image ``row`` in the list of ``words[j]`` (-1 when it has none): a binary search of
    each list, whose rows are in increasing order."""
    for j in range(words.shape[0]):
        lo = indptr[words[j]]
        hi = indptr[words[j] + 1]
        while lo < hi:
            mid = (lo + hi) // 2
            if rows[mid] < row:
                lo = mid + 1
            else:
                hi = mid
        out[j] = lo if lo < indptr[words[j] + 1] and rows[lo] == row else -1


@njit(cache=True)
def _score_symmetric(indptr, rows, sigs, qwords, qsigs, wq, alpha, tau, out):
    """out[row] += wq[i] sigma_alpha(1 - 2 h / d) over the postings of each query word i (ASMK*, eq. 15)."""
    pc = _popcount8()
    nb = sigs.shape[1]
    d = 8.0 * nb
    for i in range(qwords.shape[0]):
        w = qwords[i]
        for p in range(indptr[w], indptr[w + 1]):
            h = 0
            for j in range(nb):
                h += pc[sigs[p, j] ^ qsigs[i, j]]
            u = 1.0 - 2.0 * h / d
            if u > tau:
                out[rows[p]] += wq[i] * (u ** alpha if u >= 0 else -((-u) ** alpha))


@njit(cache=True)
def _score_asymmetric(indptr, rows, sigs, qwords, qvec, wq, alpha, tau, out):
    """out[row] += wq[i] sigma_alpha(<v_i, s> / ||v_i||_1) over the postings of each query word i. A word with many
    postings gets one 256-entry table of partial sums per signature byte (module docstring); a word with few is
    summed bit by bit, which is cheaper than building the tables. Both add the same numbers in the same order
    (within a byte by increasing bit, then byte by byte), so the choice does not change the scores."""
    nb = sigs.shape[1]
    table = np.zeros((nb, 256), np.float64)
    for i in range(qwords.shape[0]):
        w = qwords[i]
        a, b = indptr[w], indptr[w + 1]
        if a == b:
            continue
        v = qvec[i]
        l1 = 0.0
        total = 0.0
        for t in range(v.shape[0]):
            l1 += abs(v[t])
            total += v[t]
        if l1 <= 0.0:
            continue
        direct = (b - a) <= 16   # 8 bits per byte and posting against 256 entries per byte
        if not direct:
            for j in range(nb):
                table[j, 0] = 0.0
                for k in range(8):    # bit k of byte j (k = 0: least significant) stands for v[8 j + 7 - k]
                    bit = 1 << k
                    x = v[8 * j + 7 - k]
                    for byte in range(bit, 2 * bit):
                        table[j, byte] = table[j, byte - bit] + x
        for p in range(a, b):
            s = 0.0
            for j in range(nb):
                if direct:
                    byte = sigs[p, j]
                    part = 0.0
                    for k in range(8):
                        if byte & (1 << k):
                            part += v[8 * j + 7 - k]
                    s += part
                else:
                    s += table[j, sigs[p, j]]
            u = (2.0 * s - total) / l1
            if u > tau:
                out[rows[p]] += wq[i] * (u ** alpha if u >= 0 else -((-u) ** alpha))


class SMKFile:
    """Inverted file of per-word binary signatures, scored with the aggregated selective match kernel.

    Parameters
    ----------
    n_words : int -- vocabulary size K
    dim : int -- descriptor dimension d (a multiple of 8)
    idf : bool -- weigh each word by its idf, ``log(N / N_c)`` (recomputed as images are added and removed)

    Attributes
    ----------
    ids_ : ndarray of shape (N,), int64 -- indexed images, in row order
    indptr_ : (K + 1,) int64 ; rows_ : (P,) int32 ; sigs_ : (P, d/8) uint8 -- postings grouped by word
    """

    def __init__(self, n_words: int, dim: int, *, idf: bool = False):
        if dim % 8:
            raise ValueError(f"dim must be a multiple of 8 (binary signatures); got {dim}.")
        self.n_words = int(n_words)
        self.dim = int(dim)
        self.idf = bool(idf)
        self._ids = np.zeros(0, np.int64)
        self._known = set()   # ids indexed or pending: the duplicate check of add() without a pass over all ids
        self.indptr_ = np.zeros(self.n_words + 1, np.int64)
        self.rows_ = np.zeros(0, np.int32)
        self.sigs_ = np.zeros((0, self.dim // 8), np.uint8)
        self._pending = []
        self._refresh()

    @property
    def ids_(self) -> np.ndarray:
        """Indexed image ids in row order (the order of :meth:`similarities`)."""
        self._commit()
        return self._ids

    @property
    def ntotal(self) -> int:
        return int(len(self._ids)) + sum(len(p[0]) for p in self._pending)

    @property
    def n_postings(self) -> int:
        self._commit()
        return int(len(self.rows_))

    @property
    def bytes_per_posting(self) -> int:
        """Bytes of one (image, word) entry: its row (4) and its signature (d / 8)."""
        return 4 + self.dim // 8

    def add(self, ids, items) -> SMKFile:
        """Add images: ``ids`` (n,) new integers; ``items`` n pairs ``(words (u,) sorted distinct, sigs (u, d/8)
        uint8)`` as :func:`aggregate_residuals` + :func:`binarize` give."""
        ids = np.asarray(ids, np.int64).ravel()
        if len(items) != len(ids):
            raise ValueError(f"ids has {len(ids)} entries but items holds {len(items)}.")
        new = set(ids.tolist())
        if len(new) != len(ids) or not self._known.isdisjoint(new):
            raise ValueError("ids must be new and distinct.")
        for w, s in items:
            w = np.asarray(w)
            s = np.asarray(s)
            if s.shape != (len(w), self.dim // 8) or s.dtype != np.uint8:
                raise ValueError(f"signatures must be uint8 of shape ({len(w)}, {self.dim // 8}); got {s.dtype} "
                                 f"{s.shape}.")
            if len(w) and (w.min() < 0 or w.max() >= self.n_words or np.any(np.diff(w) <= 0)):
                raise ValueError(f"words must be sorted, distinct and in [0, {self.n_words}).")
        self._pending.append((ids, [np.asarray(w, np.int64) for w, _ in items], [np.asarray(s) for _, s in items]))
        self._known |= new
        return self

    def commit(self) -> None:
        """Merge the images added since the last commit (searches commit first when needed; a writer commits once
        after adding, so that searches only read)."""
        self._commit()

    def _commit(self) -> None:
        if not self._pending:
            return
        words = [np.repeat(np.arange(self.n_words), np.diff(self.indptr_))]
        rows = [np.asarray(self.rows_, np.int64)]
        sigs = [np.asarray(self.sigs_)]
        n = len(self._ids)
        new_ids = [self._ids]
        for ids, ws, ss in self._pending:
            for i, (w, s) in enumerate(zip(ws, ss, strict=True)):
                words.append(w)
                rows.append(np.full(len(w), n + i, np.int64))
                sigs.append(s)
            n += len(ids)
            new_ids.append(ids)
        self._pending = []
        self._set(np.concatenate(words), np.concatenate(rows), np.concatenate(sigs), np.concatenate(new_ids))

    def _set(self, words, rows, sigs, ids):
        order = np.argsort(words, kind="stable")
        self.indptr_ = np.zeros(self.n_words + 1, np.int64)
        np.cumsum(np.bincount(words, minlength=self.n_words), out=self.indptr_[1:])
        self.rows_ = rows[order].astype(np.int32)
        self.sigs_ = np.ascontiguousarray(sigs[order])
        self._ids = np.asarray(ids, np.int64)
        self._known = set(self._ids.tolist())
        self._refresh()

    def _refresh(self):
        """idf weights, the per-image normalisation gamma (eq. 6) and the id order after a change."""
        self._id_order = np.argsort(self._ids, kind="stable")
        self.idf_ = idf_weights(np.diff(self.indptr_), len(self._ids)) if self.idf else np.ones(self.n_words)
        self.gamma_ = self._gamma_under(self.idf_)

    def document_frequencies(self, live=None) -> np.ndarray:
        """How many images hold each word (int64 (K,)); ``live`` (bool (N,), row order): only those rows."""
        self._commit()
        if live is None:
            return np.diff(self.indptr_).astype(np.int64)
        out = np.empty(self.n_words, np.int64)
        live_counts(np.asarray(self.indptr_), np.asarray(self.rows_), np.asarray(live, np.bool_), out)
        return out

    def gamma_under(self, idf) -> np.ndarray:
        """The normalisation gamma (eq. 6) of every row under the weights ``idf`` of a collection this file is part
        of: ``(sum_{c in X} idf_c)^(-1/2)`` (float64, row order); each row's sum is taken over its words in
        increasing order (:func:`retrieval.search.postings.row_mass`), the same floats however the collection is
        split into files. What :meth:`similarities` takes, with ``idf``, as ``weights``."""
        self._commit()
        return self._gamma_under(idf)

    def _gamma_under(self, idf) -> np.ndarray:
        mass = np.empty(len(self._ids), np.float64)
        row_mass(np.asarray(self.indptr_), np.asarray(self.rows_), np.asarray(idf, np.float64), mass)
        return np.where(mass > 0, 1.0 / np.sqrt(np.maximum(mass, 1e-300)), 0.0)

    def remove(self, ids) -> int:
        """Remove images by id; returns how many were indexed."""
        self._commit()
        gone = np.isin(self._ids, np.asarray(list(np.ravel(ids)), np.int64))
        if not gone.any():
            return 0
        remap = np.full(len(self._ids), -1, np.int64)
        remap[~gone] = np.arange(int((~gone).sum()))
        words = np.repeat(np.arange(self.n_words), np.diff(self.indptr_))
        r = remap[np.asarray(self.rows_, np.int64)]
        keep = r >= 0
        self._set(words[keep], r[keep], np.asarray(self.sigs_)[keep], self._ids[~gone])
        return int(gone.sum())

    def signatures_of(self, image_id, words=None) -> tuple[np.ndarray, np.ndarray]:
        """(words (u,) sorted, sigs (u, d/8)) stored for one image. ``words``: the image's words when the caller
        knows them (e.g. from a forward index): only their lists are searched (a binary search each), instead of a
        pass over every posting."""
        self._commit()
        image_id = int(image_id)
        pos = int(np.searchsorted(self._ids, image_id, sorter=self._id_order)) if len(self._ids) else 0
        if pos >= len(self._ids) or self._ids[self._id_order[pos]] != image_id:
            raise KeyError(f"image id {image_id} is not indexed.")
        row = int(self._id_order[pos])
        if words is not None:
            words = np.unique(np.asarray(words, np.int64))
            at = np.empty(len(words), np.int64)
            _postings_of_row(self.indptr_, np.asarray(self.rows_), words, row, at)
            found = at >= 0
            return words[found], np.asarray(self.sigs_[at[found]])
        at = np.flatnonzero(np.asarray(self.rows_) == row)
        words = np.searchsorted(self.indptr_, at, side="right") - 1
        return words.astype(np.int64), np.asarray(self.sigs_[at])

    def similarities(self, qwords, qvec, *, alpha: float = 3.0, threshold: float = 0.0,
                     asymmetric: bool = True, weights=None) -> np.ndarray:
        """K(Q, X) (module docstring) for every indexed image, in row order (``ids_``); in [0, 1] when
        ``threshold >= 0``, 1 for an image whose signatures equal the query's.

        qwords : (u,) sorted distinct words of the query; qvec : (u, d) its aggregated residuals (unit norm).
        weights : ``(idf (K,), gamma (N,))`` of a larger collection this file is part of (the idf of all its
        images, :meth:`gamma_under` it); None: this file's own."""
        self._commit()
        idf, gamma = (self.idf_, self.gamma_) if weights is None else weights
        qwords = np.asarray(qwords, np.int64)
        qvec = np.ascontiguousarray(qvec, np.float64)
        out = np.zeros(len(self._ids), np.float64)
        if len(qwords) == 0 or len(self._ids) == 0:
            return out
        wq = idf[qwords]
        if asymmetric:
            _score_asymmetric(self.indptr_, self.rows_, self.sigs_, qwords, qvec, wq, float(alpha),
                              float(threshold), out)
        else:
            _score_symmetric(self.indptr_, self.rows_, self.sigs_, qwords, binarize(qvec), wq, float(alpha),
                             float(threshold), out)
        qmass = float(wq.sum())
        return out * gamma / np.sqrt(qmass) if qmass > 0 else out

    # ------------------------------------------------------------------ persistence
    def save(self, folder) -> Path:
        """Folder: ``header.json`` and the arrays ``ids``, ``indptr``, ``rows``, ``sigs``, and the derived ``idf``,
        ``gamma`` (``.npy``; recomputed when absent)."""
        self._commit()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("ids", "indptr", "rows", "sigs"):
            save_npy_atomic(folder / f"{name}.npy", np.asarray(getattr(self, "_ids" if name == "ids" else f"{name}_")))
        for name in ("idf", "gamma"):   # derived, saved so that opening reads no posting
            save_npy_atomic(folder / f"{name}.npy", np.asarray(getattr(self, f"{name}_"), np.float64))
        write_json_atomic(folder / "header.json", {"format": FORMAT, "format_version": FORMAT_VERSION,
                                                   "n_words": self.n_words, "dim": self.dim, "idf": self.idf,
                                                   "ntotal": int(len(self._ids))})
        return folder

    @classmethod
    def load(cls, folder, *, mmap: bool = True) -> SMKFile:
        folder = Path(folder)
        header = read_folder_header(folder, FORMAT, FORMAT_VERSION, "signature file")
        obj = cls(header["n_words"], header["dim"], idf=header["idf"])
        mode = "r" if mmap else None
        arr = {n: np.load(folder / f"{n}.npy", mmap_mode=mode, allow_pickle=False)
               for n in ("ids", "indptr", "rows", "sigs")}
        for name, shape in (("indptr", (obj.n_words + 1,)), ("ids", None), ("rows", None), ("sigs", None)):
            if shape is not None and arr[name].shape != shape:
                raise FormatError(f"{folder / (name + '.npy')}: shape {arr[name].shape}, expected {shape}.")
        obj._ids = np.asarray(arr["ids"], np.int64)
        obj._known = set(obj._ids.tolist())
        obj.indptr_ = np.asarray(arr["indptr"], np.int64)
        obj.rows_, obj.sigs_ = arr["rows"], arr["sigs"]
        if obj.sigs_.shape != (len(obj.rows_), obj.dim // 8) or int(obj.indptr_[-1]) != len(obj.rows_):
            raise FormatError(f"{folder}: signature arrays disagree with the header (damaged?).")
        if (folder / "idf.npy").is_file() and (folder / "gamma.npy").is_file():
            obj.idf_ = np.load(folder / "idf.npy", allow_pickle=False)
            obj.gamma_ = np.load(folder / "gamma.npy", allow_pickle=False)
            if obj.idf_.shape != (obj.n_words,) or obj.gamma_.shape != obj._ids.shape:
                raise FormatError(f"{folder}: idf.npy or gamma.npy disagree with the header (damaged?).")
            obj._id_order = np.argsort(obj._ids, kind="stable")
        else:   # written before they were saved: computed from the postings
            obj._refresh()
        return obj


def signature_vectors(sigs, dim: int) -> np.ndarray:
    """Unit-norm real vectors of packed signatures: (u, d/8) uint8 -> (u, d) float32 with entries +-1/sqrt(d)."""
    bits = np.unpackbits(np.asarray(sigs, np.uint8), axis=1)[:, :dim].astype(np.float32)
    return (2.0 * bits - 1.0) / np.float32(np.sqrt(dim))


def expand_query(parts):
    """Average query expansion in the kernel's space (after Chum et al. 2007): the per-word vectors of the query and
    of verified images, ``parts`` a list of (words (u,), vectors (u, d)) with unit-norm rows, summed word by word
    and re-normalised. Returns (words (u',) sorted distinct, vectors (u', d) float32 unit norm)."""
    words = np.concatenate([np.asarray(w, np.int64) for w, _ in parts])
    V = np.concatenate([np.asarray(v, np.float32) for _, v in parts])
    if words.size == 0:
        return words, V
    order = np.argsort(words, kind="stable")
    words, V = words[order], V[order]
    starts = np.flatnonzero(np.r_[True, words[1:] != words[:-1]])
    S = np.add.reduceat(V, starts, axis=0)
    n = np.linalg.norm(S, axis=1)
    ok = n > 1e-12
    return words[starts][ok], (S[ok] / n[ok, None]).astype(np.float32)
