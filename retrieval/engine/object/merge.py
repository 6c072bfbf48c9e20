"""A merge of object-searcher segments written as it is read: memory bounded by a block, whatever the collection.

:func:`write_merged` writes the live images of several parts (:class:`retrieval.engine.object.parts.Part`) into one
:class:`~retrieval.engine.object.searcher.ObjectSearcher` folder, the same files :meth:`ObjectSearcher.save` writes for
:func:`~retrieval.engine.object.parts.merged` of the same parts (the test suite compares them array by array):

- the images in id order; each part's rows are renumbered (``remap``: its row -> the merged row, -1 for a deleted
  image);
- the forward arrays (image after image: words, weights, frames, size) and the per-image terms (the inverted
  file's norms, the signatures' normalisation ``gamma``) copied row by row;
- the postings of the inverted file (none with signatures: :meth:`ObjectSearcher.save` leaves them to the forward
  index) and of the signatures (grouped by word, ascending rows within a word) merged a block of words at a time:
  each part's postings of those words, renumbered, the deleted ones dropped, ordered by (word, merged row).

Saved parts are read through ``os.pread`` of their ``.npy`` files, not through memory maps, so that the pages a
merge reads are not held by the process. Every file is written sequentially, then renamed. Only for parts
without idf: with idf every weight depends on the whole collection (the ``object`` preset is merged in memory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write, save_npy_atomic
from retrieval.engine.object.forward import forward_words_dtype

__all__ = ["write_merged"]

WORD_BLOCK = 512
"""Words whose postings are merged at a time."""
IMAGE_BLOCK = 2048
"""Images whose forward entries are copied at a time."""


class _Npy:
    """One saved ``.npy`` read by slices of its first axis with ``os.pread`` (no memory map)."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh)
            self.offset = fh.tell()
        if fortran:
            raise ValueError(f"{path}: Fortran-ordered array (not written by this library).")
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.fd = os.open(path, os.O_RDONLY)

    def rows(self, a: int, b: int) -> np.ndarray:
        n = max(0, int(b) - int(a))
        raw = os.pread(self.fd, n * self.row_bytes, self.offset + int(a) * self.row_bytes)
        return np.frombuffer(raw, self.dtype).reshape((n, *self.shape[1:]))

    def all(self) -> np.ndarray:
        return self.rows(0, self.shape[0])

    def close(self) -> None:
        os.close(self.fd)


class _Source:
    """The arrays of one part: read from its folder (``part.source``) when it was saved, else from memory."""

    def __init__(self, part):
        self.part = part
        s = part.searcher
        self.saved = part.source is not None
        self.files = []
        if self.saved:
            root = Path(part.source)
            self.fwd = {n: self._open(root / f"fwd_{n}.npy") for n in ("indptr", "words", "weights", "frames")
                        if (root / f"fwd_{n}.npy").exists()}
            self.fwd_indptr = self.fwd["indptr"].all()
            self.inv = {n: self._open(root / "invfile" / f"{n}.npy") for n in ("postings_ids", "postings_tf")} \
                if not s.signatures else {}   # with signatures the inverted file keeps no postings (write_merged)
            self.sig = {n: self._open(root / "signatures" / f"{n}.npy") for n in ("rows", "sigs")} \
                if s.signatures else {}
        self.inv_indptr = np.asarray(s.invfile_.indptr_) if not s.signatures else None
        self.sig_indptr = np.asarray(s.smk_.indptr_) if s.signatures else None
        self.ids = np.asarray(s.invfile_.ids_)
        self.sizes = self._forward_sizes()

    def _open(self, path: Path) -> _Npy:
        f = _Npy(path)
        self.files.append(f)
        return f

    def _forward_sizes(self) -> np.ndarray:
        """(n, 2) image sizes in row order."""
        if self.saved:
            return np.asarray(self._open(Path(self.part.source) / "fwd_sizes.npy").all(), np.int64).reshape(-1, 2)
        return np.array([self.part.searcher.forward(int(i))[3] for i in self.ids], np.int64).reshape(-1, 2)

    def forward(self, row: int) -> tuple:
        """(words, weights, frames or None) of one row."""
        if not self.saved:
            w, wt, frames, _ = self.part.searcher.forward(int(self.ids[row]))
            return np.asarray(w), np.asarray(wt), frames
        a, b = int(self.fwd_indptr[row]), int(self.fwd_indptr[row + 1])
        words = self.fwd["words"].rows(a, b)
        weights = self.fwd["weights"].rows(a, b) if "weights" in self.fwd else np.ones(words.shape, np.float32)
        return words, weights, (self.fwd["frames"].rows(a, b) if "frames" in self.fwd else None)

    def n_features(self, row: int) -> int:
        if self.saved:
            return int(self.fwd_indptr[row + 1] - self.fwd_indptr[row])
        return int(len(self.part.searcher.forward(int(self.ids[row]))[0]))

    def postings(self, kind: str, w0: int, w1: int) -> tuple:
        """(words, rows, values) of words ``w0``..``w1 - 1`` of the inverted file (``inv``: image numbers, tf) or
        of the signatures (``sig``: rows, signatures)."""
        indptr = self.inv_indptr if kind == "inv" else self.sig_indptr
        a, b = int(indptr[w0]), int(indptr[w1])
        words = np.repeat(np.arange(w0, w1, dtype=np.int64), np.diff(indptr[w0:w1 + 1]))
        s = self.part.searcher
        if kind == "inv":
            if self.saved:
                return words, self.inv["postings_ids"].rows(a, b), self.inv["postings_tf"].rows(a, b)
            return words, np.asarray(s.invfile_.postings_ids_[a:b]), np.asarray(s.invfile_.postings_tf_[a:b])
        if self.saved:
            return words, self.sig["rows"].rows(a, b), self.sig["sigs"].rows(a, b)
        return words, np.asarray(s.smk_.rows_[a:b]), np.asarray(s.smk_.sigs_[a:b])

    def close(self) -> None:
        for f in self.files:
            f.close()


class _Writer:
    """One ``.npy`` written sequentially (its shape known first), renamed over ``path`` when complete."""

    def __init__(self, path: Path, shape: tuple, dtype):
        self.path, self.shape, self.dtype = Path(path), tuple(int(v) for v in shape), np.dtype(dtype)
        self.ctx = atomic_write(self.path)
        self.fh = self.ctx.__enter__()
        np.lib.format.write_array_header_1_0(self.fh, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                       "fortran_order": False, "shape": self.shape})
        self.written = 0

    def write(self, rows) -> None:
        rows = np.ascontiguousarray(rows, self.dtype)
        self.fh.write(rows.tobytes())
        self.written += len(rows)

    def close(self) -> None:
        if self.written != self.shape[0]:
            raise AssertionError(f"{self.path}: {self.written} rows written, {self.shape[0]} expected")
        self.ctx.__exit__(None, None, None)


def _postings(sources, remaps, kind: str, n_words: int, out_rows: Path, out_values: Path, out_indptr: Path,
              rows_dtype, values_shape: tuple, values_dtype) -> None:
    """The postings of ``kind`` (module docstring) merged into ``out_*``: a first pass counts each word's live
    postings (the files' shapes), a second writes them."""
    counts = np.zeros(n_words, np.int64)
    for w0 in range(0, n_words, WORD_BLOCK):
        w1 = min(w0 + WORD_BLOCK, n_words)
        for src, remap in zip(sources, remaps, strict=True):
            words, rows, _ = src.postings(kind, w0, w1)
            live = remap[np.asarray(rows, np.int64)] >= 0
            counts[w0:w1] += np.bincount(words[live] - w0, minlength=w1 - w0)
    indptr = np.zeros(n_words + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    rows_out = _Writer(out_rows, (int(indptr[-1]),), rows_dtype)
    values_out = _Writer(out_values, (int(indptr[-1]), *values_shape), values_dtype)
    for w0 in range(0, n_words, WORD_BLOCK):
        w1 = min(w0 + WORD_BLOCK, n_words)
        parts = []
        for src, remap in zip(sources, remaps, strict=True):
            words, rows, values = src.postings(kind, w0, w1)
            new = remap[np.asarray(rows, np.int64)]
            live = new >= 0
            parts.append((words[live], new[live], np.asarray(values)[live]))
        words = np.concatenate([p[0] for p in parts])
        new = np.concatenate([p[1] for p in parts])
        values = np.concatenate([p[2] for p in parts])
        order = np.lexsort((new, words))
        rows_out.write(new[order])
        values_out.write(values[order])
    rows_out.close()
    values_out.close()
    save_npy_atomic(out_indptr, indptr)


def _patch(header: Path, **fields) -> None:
    """``fields`` set in a saved ``header.json`` (the counts of what was written)."""
    data = json.loads(header.read_text("utf-8"))
    data.update(fields)
    with atomic_write(header, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")


def _forward(sources, owners, folder: Path, model) -> None:
    """The forward arrays of the merged images, in id order, written image block by image block."""
    r = 1 if model.assignment == "hard" else 3
    n = len(owners)
    counts = np.array([sources[k].n_features(row) for _, k, row in owners], np.int64)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    F = int(indptr[-1])
    save_npy_atomic(folder / "fwd_ids.npy", np.array([i for i, _, _ in owners], np.int64))
    save_npy_atomic(folder / "fwd_indptr.npy", indptr)
    save_npy_atomic(folder / "fwd_sizes.npy", np.array([sources[k].sizes[row] for _, k, row in owners], np.int64)
          .reshape(-1, 2))
    out = {"words": _Writer(folder / "fwd_words.npy", (F, r), forward_words_dtype(model.n_words))}
    if model.assignment != "hard":   # as ObjectSearcher.save: hard weights (all 1) and dropped frames not stored
        out["weights"] = _Writer(folder / "fwd_weights.npy", (F, r), np.float32)
    if model.keep_frames:
        out["frames"] = _Writer(folder / "fwd_frames.npy", (F, 6), np.float32)
    for a in range(0, n, IMAGE_BLOCK):
        block = [sources[k].forward(row) for _, k, row in owners[a:a + IMAGE_BLOCK]]
        for j, name in enumerate(("words", "weights", "frames")):
            if block and name in out:
                if any(b[j] is None for b in block):
                    raise ValueError(f"write_merged: a part keeps no {name} but the merged searcher does.")
                out[name].write(np.concatenate([np.asarray(b[j]).reshape((len(b[j]), *out[name].shape[1:]))
                                                for b in block]))
    for w in out.values():
        w.close()


def write_merged(model, parts, folder: Path) -> int:
    """Write the live images of ``parts`` (no idf) into the searcher folder ``folder`` (module docstring); returns
    how many. ``model`` gives the parameters (its vocabulary is not written: the index's model keeps it)."""
    folder = Path(folder)
    if model.idf:
        raise ValueError("write_merged: parts with idf weights are merged in memory (object_parts.merged).")
    model.empty_like().save(folder, with_vocabulary=False)   # the layout and the headers, then every array
    sources = [_Source(p) for p in parts]
    try:
        owners = []
        for k, (p, s) in enumerate(zip(parts, sources, strict=True)):
            live = p.live_mask()
            owners += [(int(i), k, int(r)) for r, i in zip(np.flatnonzero(live).tolist(), s.ids[live].tolist(),
                                                           strict=True)]
        owners.sort()
        n = len(owners)
        remaps = [np.full(len(s.ids), -1, np.int64) for s in sources]
        for new, (_, k, r) in enumerate(owners):
            remaps[k][r] = new
        ids = np.array([i for i, _, _ in owners], np.int64)
        _forward(sources, owners, folder, model)
        inv = [np.asarray(s.part.searcher.invfile_.norm1_) for s in sources], \
            [np.asarray(s.part.searcher.invfile_.norm2_) for s in sources]
        pick = (lambda arrays: np.array([arrays[k][r] for _, k, r in owners], np.float64)) if n else \
            (lambda arrays: np.zeros(0, np.float64))
        for name, values in (("ids", ids), ("norm1", pick(inv[0])), ("norm2", pick(inv[1]))):
            save_npy_atomic(folder / "invfile" / f"{name}.npy", values)
        counts = {"ntotal": n}
        if not model.signatures:   # as ObjectSearcher.save: with signatures the BoW methods rebuild the postings
            _postings(sources, remaps, "inv", model.n_words, folder / "invfile" / "postings_ids.npy",
                      folder / "invfile" / "postings_tf.npy", folder / "invfile" / "indptr.npy",
                      np.uint32, (), np.float32)
            n_postings = _Npy(folder / "invfile" / "postings_ids.npy")
            n_postings.close()
            counts["n_postings"] = int(n_postings.shape[0])
        _patch(folder / "invfile" / "header.json", **counts)
        if model.signatures:
            dim8 = model.vocabulary_.cluster_centers_.shape[1] // 8
            save_npy_atomic(folder / "signatures" / "ids.npy", ids)
            save_npy_atomic(folder / "signatures" / "gamma.npy", pick([np.asarray(s.part.searcher.smk_.gamma_)
                                                             for s in sources]))
            _postings(sources, remaps, "sig", model.n_words, folder / "signatures" / "rows.npy",
                      folder / "signatures" / "sigs.npy", folder / "signatures" / "indptr.npy",
                      np.int32, (dim8,), np.uint8)
            _patch(folder / "signatures" / "header.json", ntotal=n)
        _patch(folder / "header.json", ntotal=n)
        return n
    finally:
        for s in sources:
            s.close()
