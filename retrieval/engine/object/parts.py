"""Incremental generations of the object presets: the state of an :class:`ObjectSearcher` as immutable segments.

The same scheme as the global presets (:mod:`retrieval.engine.segments`): a generation's ``state.json`` (format
``retrieval-index-state`` version 2, kind ``object``) lists its segments, ``deleted.npy`` the ids removed from them
since they were written; a segment ``segments/<name>/searcher/`` is an :class:`ObjectSearcher` folder of the images
one sync added (inverted file, binary signatures, forward arrays), saved without the vocabulary (the model keeps it
once). A sync writes one segment for what it adds; merges follow :func:`retrieval.engine.segments.choose_merges`
and copy the images' words, weights, frames and signatures as they are (nothing is assigned again).

Scoring several segments as one collection (:func:`view`):

- ASMK* (Tolias et al. 2013, eq. 17 with the normalisation of eq. 6): without idf a database image's similarity
  depends on its own signatures only, so every segment scores its images and the scores are put side by side;
- the BoW dissimilarities of Zhu et al. 2013: l1 / l2 (eq. 1) per image; delta_1 / delta_2 (eq. 9, 11) need the
  collection's sums, taken over the live images of every segment (:meth:`InvertedFile.terms`) in id order;
- the first ``R`` images are chosen by (score, id) (:func:`retrieval.engine.object.scores.topk_by_id`), so the lists do not depend on how the
  images are spread over segments: after any sequence of syncs they equal those of one build.

With idf (the ``object`` preset) every image's weights depend on the whole collection (Zhu et al. 2013, section
2.2; the w_c of ASMK*): a view scores every part under the idf of the live images of all parts and recomputes each
image's normalisation under it (:class:`CollectionWeights`, from the postings, once per view), so segments and
shards are written once like the others' and rank as one collection. A merge of idf parts is made in memory (the
merged segment's own saved weights are then its own; views never use them).
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write
from retrieval.engine.backend import STATE_FORMAT, read_npy, write_npy
from retrieval.engine.object.forward import EntryLookup
from retrieval.engine.object.merge import write_merged
from retrieval.engine.object.scores import topk_by_id  # noqa: F401 (part of this module's API)
from retrieval.engine.object.searcher import vocabulary_digest
from retrieval.engine.segments import (
    SEGMENTED_FORMAT_VERSION,
    choose_merges,
    mark_removed,
    segments_root,
    shard_of,
)
from retrieval.search.dissimilarities import idf_weights

__all__ = ["ObjectSegments", "Part", "merged", "topk_by_id", "view"]

MERGE_BATCH = 256
"""Images copied at a time by a merge."""


@dataclass
class Part:
    """One loaded segment: its folder name (None: not written yet), its searcher and the ids deleted from it since
    it was written (sorted)."""

    name: str | None
    searcher: object
    dead: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    shard: int = 0
    source: Path | None = None   # the searcher folder it was read from (None: built in memory)

    @property
    def ids(self) -> np.ndarray:
        return np.asarray(self.searcher.invfile_.ids_)

    @property
    def rows(self) -> int:
        return int(len(self.ids))

    @property
    def live(self) -> int:
        return self.rows - int(len(self.dead))

    def live_mask(self) -> np.ndarray:
        return ~np.isin(self.ids, self.dead) if len(self.dead) else np.ones(self.rows, bool)


class PartsForward(EntryLookup):
    """The forward entries of several parts (an id is looked up in each part in turn)."""

    def __init__(self, parts: list[Part]):
        self.parts = parts

    def get(self, image_id, default=None):
        for p in self.parts:
            if not (len(p.dead) and np.isin(int(image_id), p.dead)):
                entry = p.searcher.forward_entries().get(int(image_id))
                if entry is not None:
                    return entry
        return default


class CollectionWeights:
    """The idf of the live images of several parts and each part's per-image normalisations under it (Tolias et
    al. 2013, eq. 6 with w_c = idf_c; Zhu et al. 2013, section 2.2): computed the first time a search asks, once per
    view, under a lock (derived state, never changed afterwards), from the parts' postings only. The idf is
    ``log(N / N_c)`` over the live images of every part, and an image's normalisation sums its own words' weights
    in word order: the same floats however the images are split into parts (shards, segments)."""

    def __init__(self, parts: list[Part], masks: list[np.ndarray], n_words: int):
        self.parts, self.masks, self.n_words = parts, masks, int(n_words)
        self.n_live = int(sum(int(m.sum()) for m in masks))
        self._lock = threading.Lock()
        self._smk = self._bow = None

    def _idf(self, counts) -> np.ndarray:
        df = np.zeros(self.n_words, np.int64)
        for c in counts:
            df += c
        return idf_weights(df, self.n_live)

    def signatures(self) -> tuple:
        """``(idf, [gamma of each part's rows])`` of the signatures (ASMK*)."""
        with self._lock:
            if self._smk is None:
                files = [p.searcher.smk_ for p in self.parts]
                idf = self._idf([f.document_frequencies(m) for f, m in zip(files, self.masks, strict=True)])
                self._smk = idf, [f.gamma_under(idf) for f in files]
            return self._smk

    def histograms(self) -> tuple:
        """``(idf, [InvertedFile.weights_under(idf) of each part])`` of the bag-of-words scorings."""
        with self._lock:
            if self._bow is None:
                files = [p.searcher.invfile_ for p in self.parts]
                idf = self._idf([f.document_frequencies(m) for f, m in zip(files, self.masks, strict=True)])
                self._bow = idf, [f.weights_under(idf) for f in files]
            return self._bow


class PartsSignatures:
    """The binary signatures of several parts read as one :class:`retrieval.search.smk.SMKFile`: rows are the
    parts' live rows, part after part; with idf, scored under the collection's weights (:class:`CollectionWeights`)."""

    def __init__(self, parts: list[Part], masks: list[np.ndarray], ids: np.ndarray,
                 weights: CollectionWeights | None = None):
        self.parts, self.masks, self.ids_ = parts, masks, ids
        self.weights = weights

    @property
    def idf_(self) -> np.ndarray:
        """The collection's idf (with idf), else ones."""
        if self.weights is not None:
            return self.weights.signatures()[0]
        return np.ones(self.parts[0].searcher.n_words if self.parts else 0)

    def similarities(self, qwords, qvec, **options) -> np.ndarray:
        if self.weights is None:
            per_part = [None] * len(self.parts)
        else:
            idf, gammas = self.weights.signatures()
            per_part = [(idf, g) for g in gammas]
        out = [p.searcher.smk_.similarities(qwords, qvec, weights=w, **options)[m]
               for p, m, w in zip(self.parts, self.masks, per_part, strict=True)]
        return np.concatenate(out) if out else np.zeros(0, np.float64)

    def signatures_of(self, image_id, words=None):
        for p in self.parts:
            if len(p.dead) and np.isin(int(image_id), p.dead):
                continue
            try:
                return p.searcher.smk_.signatures_of(image_id, words=words)
            except KeyError:
                continue
        raise KeyError(f"image id {int(image_id)} is not indexed.")


class PartsInvertedFile:
    """The inverted files of several parts scored as one collection (module docstring); with idf, under the
    collection's weights (:class:`CollectionWeights`)."""

    def __init__(self, parts: list[Part], masks: list[np.ndarray], ids: np.ndarray, n_words: int,
                 weights: CollectionWeights | None = None):
        self.parts, self.masks, self.ids_ = parts, masks, ids
        self.weights = weights
        self._ones = np.ones(n_words)
        self._by_id = np.argsort(ids, kind="stable")

    @property
    def idf_(self) -> np.ndarray:
        return self.weights.histograms()[0] if self.weights is not None else self._ones

    @property
    def ntotal(self) -> int:
        return int(len(self.ids_))

    def commit(self) -> None:
        """Nothing pending: the parts are committed."""

    def scores_of_weights(self, qw, qv, method: str, alpha: float):
        per_part = self.weights.histograms()[1] if self.weights is not None else [None] * len(self.parts)
        terms = [p.searcher.invfile_.terms(qw, qv, method, w) for p, w in zip(self.parts, per_part, strict=True)]
        t = {key: np.concatenate([x[key][m] for x, m in zip(terms, self.masks, strict=True)])
             for key in (terms[0] if terms else {})}
        if method in ("l1", "l2"):
            return t.get("scores", np.zeros(0)), float("nan")
        order = self._by_id   # sums in id order: the same whatever the segments
        if method == "delta1":
            total = float(t["acc"][order].sum())
            wbar = alpha * float(t["norm1"][order].sum()) / total if total > 0 else 0.0
            return t["norm1"] - wbar * t["acc"], wbar
        den = float(t["qterm"][order].sum())
        w = alpha * float(t["tterm"][order].sum()) / den if den > 0 else 0.0
        return w * t["qterm"] + t["tterm"], w


def view(model, parts: list[Part]):
    """A searcher that searches ``parts`` as one collection (module docstring); ``model`` gives the parameters and
    the vocabulary. With idf, the parts are scored under the weights of all their live images
    (:class:`CollectionWeights`), never their own."""
    masks = [p.live_mask() for p in parts]
    ids = np.concatenate([p.ids[m] for p, m in zip(parts, masks, strict=True)]) if parts else np.empty(0, np.int64)
    weights = CollectionWeights(parts, masks, model.n_words) if model.idf else None
    signatures = PartsSignatures(parts, masks, ids, weights) if model.signatures else None
    return model.composed(model, PartsInvertedFile(parts, masks, ids, model.n_words, weights), signatures,
                          PartsForward(parts))


def merged(model, parts: list[Part], keep=None):
    """One searcher holding the live images of ``parts`` in id order (only those for which ``keep(ids)`` is True,
    when given), copied as they are (words, weights, frames, signatures: nothing is assigned again)."""
    out = model.empty_like()
    owners = [(int(i), p) for p in parts for i in p.ids[p.live_mask()]]
    if keep is not None and owners:
        mask = keep(np.array([i for i, _ in owners], np.int64))
        owners = [o for o, k in zip(owners, mask, strict=True) if k]
    owners.sort(key=lambda x: x[0])
    for s in range(0, len(owners), MERGE_BATCH):
        batch = owners[s:s + MERGE_BATCH]
        entries, signed = {}, []
        for i, p in batch:
            w, wt, frames, size = p.searcher.forward(i)
            keep_frames = model.keep_frames and frames is not None
            entries[i] = (np.array(w), np.array(wt), np.array(frames) if keep_frames else None, size)
            if model.signatures:
                uw, sigs = p.searcher.smk_.signatures_of(i, words=np.asarray(w)[:, 0])
                signed.append((uw, np.array(sigs)))
        out.add_encoded(np.array([i for i, _ in batch], np.int64), entries, signed)
    out.commit()
    return out


class ObjectSegments:
    """The segmented state of an object index (module docstring): ``parts`` written, ``pending`` what this writer
    added. Written by one writer; searches read :meth:`view` only."""

    def __init__(self, model, n_shards: int = 1):
        self.model = model
        self.digest = vocabulary_digest(model.vocabulary_)   # hashed once: every segment's folder is checked
        self.n_shards = int(n_shards)
        self.parts: list[Part] = []
        self.pending = None
        self.merge_all = False

    def all_parts(self) -> list[Part]:
        parts = list(self.parts)
        if self.pending is not None and self.pending.ntotal:
            parts.append(Part(None, self.pending))
        return parts

    @property
    def ids(self) -> np.ndarray:
        """The live ids, increasing."""
        parts = [p.ids[p.live_mask()] for p in self.all_parts()]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def view(self):
        return view(self.model, self.all_parts())

    def info(self) -> dict:
        parts = self.all_parts()
        return {"segments": len(parts), "rows": sum(p.rows for p in parts), "live": sum(p.live for p in parts),
                "quantizer_nlist": None}

    def add(self, ids, features) -> None:
        if self.pending is None:
            self.pending = self.model.empty_like()
        self.pending.add(np.asarray(ids, np.int64), list(features))

    def add_encoded(self, ids, entries: dict, signed: list) -> None:
        if self.pending is None:
            self.pending = self.model.empty_like()
        self.pending.add_encoded(np.asarray(ids, np.int64), entries, signed)

    def commit(self) -> None:
        if self.pending is not None:
            self.pending.commit()

    def remove(self, ids) -> None:
        ids = np.unique(np.asarray(list(ids), dtype=np.int64))
        if len(ids) == 0:
            return
        if self.pending is not None:
            self.pending.remove(ids)
        mark_removed(self.parts, ids)

    def load(self, folder: Path | None, loader) -> None:
        """The state of generation folder ``folder`` (None: empty); ``loader(path)`` opens a searcher folder with
        the model's vocabulary. A state of format version 1 (one searcher in the generation folder) opens as one
        part, written as a segment at the next save."""
        self.parts, self.pending, self.merge_all = [], None, False
        if folder is None:
            return
        folder = Path(folder)
        header = json.loads((folder / "state.json").read_text("utf-8"))
        if header.get("format") != STATE_FORMAT or header.get("kind") != "object":
            raise ValueError(f"{folder}: index state {header.get('format')!r} kind {header.get('kind')!r}; "
                             f"expected {STATE_FORMAT!r} 'object'.")
        version = header.get("format_version")
        if version == 1:
            self.parts = [Part(None, loader(folder / "searcher"), source=folder / "searcher")]
            return
        if version != SEGMENTED_FORMAT_VERSION:
            raise ValueError(f"{folder}: index state format version {version!r}; this library reads 1 and "
                             f"{SEGMENTED_FORMAT_VERSION}.")
        root = segments_root(folder)
        deleted = read_npy(folder / "deleted.npy", mmap=False) if (folder / "deleted.npy").exists() \
            else np.empty(0, np.int64)
        if int(header.get("shards", 1)) != self.n_shards:
            raise ValueError(f"{folder}: a state of {header.get('shards', 1)} shard(s); the index has "
                             f"{self.n_shards}.")
        for entry in header["segments"]:
            path = root / entry["name"] / "searcher"
            part = Part(entry["name"], loader(path), shard=int(entry.get("shard", 0)), source=path)
            if part.rows != int(entry["rows"]):
                raise ValueError(f"{root / entry['name']}: {part.rows} rows, the generation expects "
                                 f"{entry['rows']} (the segment was changed).")
            part.dead = np.asarray(deleted[np.isin(deleted, part.ids)], np.int64)
            self.parts.append(part)

    def _by_shard(self) -> list[list[Part]]:
        """The parts of each shard, what this writer added split among them by
        :func:`retrieval.engine.segments.shard_of` (the same hash as the global presets' shards)."""
        if self.n_shards == 1:
            return [self.all_parts()]
        out = [[p for p in self.parts if p.shard == s] for s in range(self.n_shards)]
        if self.pending is not None and self.pending.ntotal:
            new = Part(None, self.pending)
            for s in range(self.n_shards):
                mine = merged(self.model, [new], keep=lambda ids, s=s: shard_of(ids, self.n_shards) == s)
                if mine.ntotal:
                    out[s].append(Part(None, mine, shard=s))
        return out

    def save(self, folder: Path) -> None:
        """Write the new segments (``segments/<name>.tmp``, renamed by the publish) and the generation's
        ``state.json`` and ``deleted.npy``."""
        folder = Path(folder)
        root = segments_root(folder)
        root.mkdir(exist_ok=True)
        self.commit()
        segments = []
        for s, parts in enumerate(self._by_shard()):
            groups = choose_merges(parts, self.merge_all)
            merged_away = {id(p) for g in groups for p in g}
            segments += [p for p in parts if id(p) not in merged_away]
            for group in groups:
                name = f"seg-{uuid.uuid4().hex[:16]}"
                path = root / f"{name}.tmp" / "searcher"
                if len(group) == 1 and not len(group[0].dead):   # one part (what was added): saved as it is
                    searcher = group[0].searcher
                    if searcher.ntotal:
                        searcher.save(path, with_vocabulary=False)
                elif self.model.idf:   # merged in memory: the segment's own saved weights are its own
                    searcher = merged(self.model, group)
                    if searcher.ntotal:
                        searcher.save(path, with_vocabulary=False)
                else:   # written as read, a block at a time (retrieval.engine.object.merge), then mapped
                    write_merged(self.model, group, path)
                    searcher = self.model.load(path, vocabulary=self.model.vocabulary_, digest=self.digest)
                if searcher.ntotal:   # the publish renames <name>.tmp to <name>
                    segments.append(Part(name, searcher, shard=s, source=root / name / "searcher"))
                else:
                    shutil.rmtree(path.parent, ignore_errors=True)
        deleted = np.unique(np.concatenate([p.dead for p in segments])) if segments else np.empty(0, np.int64)
        write_npy(folder / "deleted.npy", deleted.astype(np.int64))
        header = {"format": STATE_FORMAT, "format_version": SEGMENTED_FORMAT_VERSION, "kind": "object",
                  "ntotal": int(sum(p.live for p in segments)), "shards": self.n_shards,
                  "segments": [{"name": p.name, "rows": p.rows, "deleted": int(len(p.dead)), "shard": p.shard}
                               for p in segments]}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)
        self.parts, self.pending, self.merge_all = segments, None, False
