"""Incremental generations: the first stage of a ``global`` or ``binary`` index as immutable segments.

A generation of an index (``gens/<g>/``) no longer holds the search arrays themselves: its ``state.json`` (format
``retrieval-index-state`` version 2) lists the *segments* it is made of, and ``deleted.npy`` the ids removed from them
since they were written. A segment (``segments/<name>/``, beside ``gens/``) is the complete state of one first stage
(:class:`retrieval.engine.first_stages.VectorStage`, :class:`~retrieval.engine.code_stages.CodesStage` or
:class:`~retrieval.engine.code_stages.BinaryStage`: ``ids.npy`` in increasing order and the rows' vectors or codes),
written once and never changed; several generations share it. So a sync writes a new segment for what it adds, a
deletion list for what it removes, and a small ``state.json``: its cost is what changed, not the collection.

Segments are merged (:meth:`SegmentedStage.save_state`) when more than :data:`MAX_SEGMENTS` of them are live (the
smallest ones first: the cost of a merge stays near the size of what was recently added) or when a quarter of a
segment's rows are deleted; :meth:`SegmentedStage.compact` (``retrieval compact``) merges them all into one. A merge
copies rows as they are (vectors, PQ codes, binary codes: nothing is re-encoded), drops the deleted rows and orders
them by id.

The IVFADC of the ``default`` preset (``index.type`` ivfadc, Jegou et al. 2012, sec. V-A) has its coarse quantiser and
residual PQ trained ONCE, when the collection first reaches ``index.min_images`` (on a sample of at most
``nlist * 256`` of its vectors), and saved as a segment of its own (``quantizer`` in ``state.json``); each segment
fills its own inverted lists with it. It is trained again only when asked (``retrieval index --retrain``,
``retrieval compact --retrain``) or when the collection outgrew it: :func:`quantizer_outgrown` (the ``nlist`` the
preset would choose for the current size, ``min(index.nlist, n / 39)``, is at least twice the trained one). A new
quantiser rewrites every segment once.

A search asks every segment for its candidates (asking for as many more as it has deleted rows, which are then
dropped) and merges them exactly as one stage holding every row ranks them: vectors by
:func:`retrieval.engine.first_stages.merge_candidates` (IVFADC candidates by (ADC distance, id) up to the shortlist,
then (exact inner product, id)), codes by (distance, id). The lists are the same as one segment's.

A generation of format version 1 (one complete state in the generation folder, written by earlier versions) opens
as one segment; the next publish writes it out as a segment (once).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write
from retrieval.engine.backend import STATE_FORMAT, read_npy, write_npy
from retrieval.engine.first_stages import FirstStage, merge_candidates
from retrieval.engine.hits import Hit

SEGMENTED_FORMAT_VERSION = 2
MAX_SEGMENTS = 8
"""Live segments above which the smallest are merged at a publish."""
DEAD_FRACTION = 0.25
"""A segment with more than this fraction of its rows deleted is rewritten (merged) at a publish."""
QUANTIZER_SAMPLE_PER_LIST = 256
"""Training vectors per coarse list drawn to train the IVFADC quantiser (faiss's max_points_per_centroid)."""

__all__ = ["MAX_SEGMENTS", "SegmentedStage", "UnreadableState", "choose_merges", "mark_removed", "quantizer_outgrown",
           "segment_names", "segments_root", "shard_of"]


def segments_root(gen_folder) -> Path:
    """The ``segments/`` folder of the index whose generation folder (``gens/<g>`` or ``gens/<g>.tmp``) is
    ``gen_folder``."""
    return Path(gen_folder).parent.parent / "segments"


class UnreadableState(ValueError):
    """A generation's ``state.json`` exists but cannot be read: the segments it references are unknown (a clean-up
    must then delete no segment)."""


def segment_names(gen_folder) -> list[str]:
    """The segment folders (names under :func:`segments_root`) a generation references, its quantiser included
    (empty for a state of format version 1 or without ``state.json``). :class:`UnreadableState` (one line naming
    the file) when ``state.json`` is there but cannot be read: an unknown list is never an empty one."""
    path = Path(gen_folder) / "state.json"
    if not path.exists():
        return []
    try:
        header = json.loads(path.read_text("utf-8"))
        names = [str(s["name"]) for s in header.get("segments", [])]
        if header.get("quantizer"):
            names.append(str(header["quantizer"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnreadableState(f"{path}: unreadable ({type(exc).__name__}: {exc}); the segments it references "
                              f"are unknown.") from None
    return names


def shard_of(ids, n_shards: int) -> np.ndarray:
    """The shard (0 .. n_shards - 1) of each image id: splitmix64 of the id modulo ``n_shards`` -- stable across
    runs, machines and library versions, and spreading consecutive ids evenly."""
    z = np.asarray(ids, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(n_shards)).astype(np.int64)


def quantizer_outgrown(trained_nlist: int, preset_nlist: int, n: int) -> bool:
    """True when a collection of ``n`` images outgrew a quantiser trained with ``trained_nlist`` lists: the
    ``nlist`` chosen for ``n`` (``min(preset_nlist, n // 39)``) is at least twice ``trained_nlist``."""
    return min(int(preset_nlist), max(1, n // 39)) >= 2 * int(trained_nlist)


def choose_merges(parts: list, merge_all: bool) -> list[list]:
    """The segments a save merges into one (module docstring): every segment not written yet (what this writer
    added, a state of format version 1) or with more than :data:`DEAD_FRACTION` of its rows deleted, plus the
    smallest others while more than :data:`MAX_SEGMENTS` would remain; all of them with ``merge_all`` (a
    compaction). ``parts``: objects with ``name`` (None: not written yet), ``rows`` and ``live``."""
    if merge_all:
        return [parts] if parts else []
    need = [p for p in parts if p.name is None or p.live < p.rows * (1 - DEAD_FRACTION)]
    others = sorted((p for p in parts if all(p is not x for x in need)), key=lambda p: p.live)
    extra = len(others) + (1 if need else 0) - MAX_SEGMENTS
    if extra > 0:
        need = need + others[:extra + (0 if need else 1)]
    return [need] if need else []


def mark_removed(parts: list, ids: np.ndarray) -> None:
    """Record the removed ``ids`` (distinct) in the deletion list (``dead``, sorted) of every written part that
    holds them (``ids``): the segments themselves are never changed."""
    for p in parts:
        hit = ids[np.isin(ids, np.asarray(p.ids))]
        if len(hit):
            p.dead = np.union1d(p.dead, hit)


@dataclass
class Segment:
    """One loaded segment: its folder name (None: not written yet, or a state of format version 1), its stage
    and the ids deleted from it since it was written (sorted)."""

    name: str | None
    stage: FirstStage
    dead: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @property
    def ids(self) -> np.ndarray:
        return self.stage.ids

    @property
    def rows(self) -> int:
        return int(len(self.stage.ids))

    @property
    def live(self) -> int:
        return self.rows - int(len(self.dead))


class SegmentedStage(FirstStage):
    """A first stage stored as immutable segments (module docstring).

    Parameters
    ----------
    preset, effective : the preset and its reduced parameters
    base : FirstStage
        The stage that holds the trained model (``fit``, ``save_model``, ``load_model``) and makes the empty
        segments (:meth:`FirstStage.empty_part`).
    """

    def __init__(self, preset: dict, effective: dict, base: FirstStage):
        super().__init__(preset, effective)
        self.base = base
        self.kind = base.kind
        self.stores_vectors = base.stores_vectors
        self.shardable = base.shardable
        self.segments: list[Segment] = []
        self.pending: FirstStage | None = None   # what this writer added (written as a new segment)
        self.quantizer_name: str | None = None
        self.quantizer_nlist = 0
        self.retrain = False                     # train the IVFADC quantiser again at the next save (--retrain)
        self.merge_all = False                   # merge every segment into one at the next save (compact)
        self._root: Path | None = None

    # ------------------------------------------------------------------ the model (the base stage's)
    def fit(self, encoder, features_of, n_images: int, rng) -> None:
        self.base.fit(encoder, features_of, n_images, rng)

    def save_model(self, folder: Path, info: dict) -> None:
        self.base.save_model(folder, info)

    def load_model(self, folder: Path, info: dict) -> None:
        self.base.load_model(folder, info)

    @property
    def methods(self) -> tuple:
        return self.base.methods

    def method_options(self, method: str) -> dict:
        return self.base.method_options(method)

    # ------------------------------------------------------------------ state
    def _parts(self) -> list[Segment]:
        parts = list(self.segments)
        if self.pending is not None and len(self.pending.ids):
            parts.append(Segment(None, self.pending))
        return parts

    @property
    def ntotal(self) -> int:
        """Live images."""
        return sum(p.live for p in self._parts())

    @property
    def ids(self) -> np.ndarray:
        """The live ids, increasing (reads every segment's ids: for writers and tests, not searches)."""
        parts = [np.asarray(p.stage.ids)[~np.isin(p.stage.ids, p.dead)] for p in self._parts()]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    @property
    def vectors(self):
        return None

    @property
    def ivf(self):
        """The IVFADC of the only segment, when there is one segment with inverted lists (None otherwise)."""
        parts = self._parts()
        return getattr(parts[0].stage, "ivf", None) if len(parts) == 1 else None

    def _pending(self) -> FirstStage:
        if self.pending is None:
            self.pending = self.base.empty_part()
        return self.pending

    def add(self, ids, chunks) -> None:
        self._pending().add(np.asarray(ids, np.int64), chunks)

    def add_vectors(self, ids, vectors) -> None:
        self._pending().add_vectors(ids, vectors)

    def remove(self, ids) -> None:
        ids = np.unique(np.asarray(list(ids), dtype=np.int64))
        if len(ids) == 0:
            return
        if self.pending is not None:
            self.pending.remove(ids)
        mark_removed(self.segments, ids)

    def load_state(self, folder: Path | None) -> None:
        self.segments, self.pending = [], None
        self.quantizer_name, self.quantizer_nlist = None, 0
        if folder is None:
            self._root = None
            return
        folder = Path(folder)
        self._root = segments_root(folder)
        header = json.loads((folder / "state.json").read_text("utf-8"))
        if header.get("format") != STATE_FORMAT or header.get("kind") != self.kind:
            raise ValueError(f"{folder}: index state {header.get('format')!r} kind {header.get('kind')!r}; "
                             f"expected {STATE_FORMAT!r} {self.kind!r}.")
        version = header.get("format_version")
        if version == 1:   # one complete state in the generation folder (earlier versions): written out at the next save
            stage = self.base.empty_part()
            stage.load_state(folder)
            self.segments = [Segment(None, stage)]
            return
        if version != SEGMENTED_FORMAT_VERSION:
            raise ValueError(f"{folder}: index state format version {version!r}; this library reads 1 and "
                             f"{SEGMENTED_FORMAT_VERSION}.")
        deleted = read_npy(folder / "deleted.npy", mmap=False) if (folder / "deleted.npy").exists() \
            else np.empty(0, np.int64)
        for entry in header["segments"]:
            stage = self.base.empty_part()
            stage.load_state(self._root / entry["name"])
            stored = np.asarray(stage.ids)
            if len(stored) != int(entry["rows"]):
                raise ValueError(f"{self._root / entry['name']}: {len(stored)} rows, the generation expects "
                                 f"{entry['rows']} (the segment was changed).")
            if len(stored) and len(deleted):
                pos = np.minimum(np.searchsorted(stored, deleted), len(stored) - 1)
                dead = deleted[stored[pos] == deleted]
            else:
                dead = np.empty(0, np.int64)
            self.segments.append(Segment(entry["name"], stage, dead))
        self.quantizer_name = header.get("quantizer")
        self.quantizer_nlist = int(header.get("quantizer_nlist") or 0)

    def segment_info(self) -> dict:
        parts = self._parts()
        return {"segments": len(parts), "rows": sum(p.rows for p in parts), "live": sum(p.live for p in parts),
                "quantizer_nlist": self.quantizer_nlist or None}

    def plan_compaction(self, *, merge_all: bool, retrain: bool) -> bool:
        self.merge_all = self.merge_all or bool(merge_all)
        self.retrain = self.retrain or bool(retrain)
        return True

    # ------------------------------------------------------------------ writing
    def _write_segment(self, root: Path, stage: FirstStage, dim) -> str:
        """``stage`` written as ``root/<name>.tmp/`` (the publish that references it renames it to ``<name>``)."""
        name = f"seg-{uuid.uuid4().hex[:16]}"
        tmp = root / f"{name}.tmp"
        tmp.mkdir(parents=True)
        stage.save_state(tmp, dim)
        return name

    def _quantizer(self, root: Path):
        """The IVFADC quantiser of the state (loaded from its segment), or None."""
        if not self.quantizer_name:
            return None
        from retrieval.search import IVFADC

        return IVFADC.load(root / self.quantizer_name / "ivfadc", mmap=False)

    def _sample(self, parts: list[Segment], n_sample: int, seed: int) -> np.ndarray:
        """Up to ``n_sample`` live vectors drawn uniformly from ``parts`` (float32), read row by row from the
        memory-mapped segments."""
        sizes = np.array([p.rows for p in parts])
        total = int(sizes.sum())
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(total, min(n_sample, total), replace=False)) if total > n_sample \
            else np.arange(total)
        out, start = [], 0
        for p, size in zip(parts, sizes, strict=True):
            rows = pick[(pick >= start) & (pick < start + size)] - start
            start += size
            if len(rows):
                ids = np.asarray(p.stage.ids)[rows]
                rows = rows[~np.isin(ids, p.dead)]
                out.append(np.asarray(p.stage.row_arrays()["vectors"][rows], np.float32))
        return np.concatenate(out) if out else np.empty((0, 0), np.float32)

    def _needs_quantizer(self, n: int) -> bool:
        ix = self.config.index
        return self.stores_vectors and ix.type == "ivfadc" and n >= ix.min_images

    def save_state(self, folder: Path, dim) -> None:
        """Write the new segments (into ``segments/<name>.tmp``, renamed by the publish) and the generation's
        ``state.json`` and ``deleted.npy`` (module docstring)."""
        folder = Path(folder)
        root = segments_root(folder)
        root.mkdir(exist_ok=True)
        parts = self._parts()
        n = sum(p.live for p in parts)
        quantizer = None
        use_quantizer = self.quantizer_name is not None or self._needs_quantizer(n)
        if use_quantizer:
            outgrown = self.quantizer_name and quantizer_outgrown(self.quantizer_nlist, self.config.index.nlist, n)
            legacy = [p.stage.ivf for p in parts if p.name is None and getattr(p.stage, "ivf", None) is not None]
            if self.quantizer_name is None and legacy and not self.retrain:
                quantizer = legacy[0].empty_like()   # a version-1 state's IVFADC: its quantisers are kept
            if self.quantizer_name is None or self.retrain or outgrown:
                if quantizer is None:
                    rng_seed = self.config.training.random_state
                    nlist = int(min(self.config.index.nlist, max(1, n // 39)))
                    sample = self._sample(parts, nlist * QUANTIZER_SAMPLE_PER_LIST, rng_seed)
                    quantizer = self.base.train_quantizer(sample, n)
                name = f"quantizer-{uuid.uuid4().hex[:16]}"
                (root / f"{name}.tmp").mkdir()
                quantizer.save(root / f"{name}.tmp" / "ivfadc")
                self.quantizer_name, self.quantizer_nlist = name, int(quantizer.nlist)
                groups = [parts]   # every segment gets inverted lists of the new quantiser
            else:
                quantizer = self._quantizer(root)
                groups = choose_merges(parts, self.merge_all)
        else:
            groups = choose_merges(parts, self.merge_all)
        merged_away = {id(p) for g in groups for p in g}
        kept = [p for p in parts if id(p) not in merged_away]
        written = []
        for group in groups:
            stage = self.base.empty_part()
            stage.absorb([(p.stage, p.dead) for p in group])
            if quantizer is not None:
                stage.quantizer = quantizer
            if len(stage.ids):
                written.append(Segment(self._write_segment(root, stage, dim), stage))
        segments = kept + written
        deleted = np.unique(np.concatenate([p.dead for p in segments])) if segments else np.empty(0, np.int64)
        write_npy(folder / "deleted.npy", deleted.astype(np.int64))
        header = {"format": STATE_FORMAT, "format_version": SEGMENTED_FORMAT_VERSION, "kind": self.kind,
                  "ntotal": int(sum(p.live for p in segments)), "dim": int(dim()),
                  "segments": [{"name": p.name, "rows": p.rows, "deleted": int(len(p.dead))} for p in segments],
                  "quantizer": self.quantizer_name if use_quantizer else None,
                  "quantizer_nlist": self.quantizer_nlist if use_quantizer else None}
        with atomic_write(folder / "state.json", "w") as fh:
            json.dump(header, fh, indent=2, sort_keys=True)
        self.segments, self.pending = segments, None
        self.retrain = self.merge_all = False

    # ------------------------------------------------------------------ search
    def search(self, q: np.ndarray, k: int, *, reference: np.ndarray | None = None, **options) -> list[Hit]:
        """The top ``k`` of every segment merged as one stage ranks them (module docstring); ``reference``: what
        ``similarity`` 1 means (:meth:`FirstStage.search <retrieval.engine.first_stages.FirstStage.search>`)."""
        parts = [p for p in self._parts() if p.live > 0]
        if not parts:
            return []
        if self.stores_vectors:
            short = max(k, self.config.index.shortlist)
            tops = []
            for p in parts:
                extra = len(p.dead)
                ids, ip, adc = p.stage.candidates(q, k + extra, short + extra)
                if extra:
                    keep = ~np.isin(ids, p.dead)
                    ids, ip, adc = ids[keep], ip[keep], None if adc is None else adc[keep]
                tops.append((ids, ip, adc))
            return merge_candidates(tops, k, min(short, sum(p.live for p in parts)),
                                    self.base.reference_ip(q, reference))
        hits = []
        for p in parts:
            found = p.stage.search(q, k + len(p.dead), reference=reference, **options)
            hits += [h for h in found if not len(p.dead) or not np.isin(h.id, p.dead)]
        hits.sort(key=lambda h: (h.distance, h.id))
        return hits[:k]

    def vectors_of(self, ids) -> np.ndarray | None:
        if not self.stores_vectors:
            return None
        ids = np.asarray(ids, np.int64)
        out = np.zeros((len(ids), 0), np.float32)
        found = np.zeros(len(ids), bool)
        for p in self._parts():
            rows = p.stage.rows_of(ids)
            hit = (rows >= 0) & ~found
            if hit.any():
                if out.shape[1] == 0:
                    out = np.zeros((len(ids), p.stage.vectors.shape[1]), np.float32)
                out[hit] = np.asarray(p.stage.vectors[rows[hit]], np.float32)
                found |= hit
        if not found.all():
            raise KeyError(f"image id {int(ids[~found][0])} is not stored")
        return out
