"""The compact global code of each photo that ``retrieval duplicates`` finds its candidate pairs with
(:mod:`retrieval.app.duplicates.candidates`).

Every preset uses the same code, so that one calibrated threshold holds for all: the Fisher vector of the
package's generic ``default`` model (:mod:`retrieval.app.generic_models`: RootSIFT reduced to 64-d, 64 Gaussians,
power and L2 normalisation, PCA to 256-d; Jegou et al. 2012, eq. 6-7), computed from the stored features. The codes
are kept in the index folder (:class:`CodeParts`): each sync encodes the photos it adds (:func:`keep_codes`), so a
duplicates run reads codes and encodes only what an older index or a missing generic model left out. What is kept
costs what changed: a sync or a run writes one new part file for the photos it encoded, never the whole set again;
the parts are merged into one (and codes of photos no longer indexed dropped) once there are more than
:data:`MAX_PARTS`.

Photos turned by a quarter turn: a photo's code is also computed for its features turned by 90 and 180 degrees
(:func:`retrieval.app.duplicates.same_photo.turned`): a pair turned by 270 degrees is found from its other photo's 90.
The similarity of a pair is the largest over the turns, and the turn is kept for verification.
"""

from __future__ import annotations

import json
import logging
import threading
import zipfile
from pathlib import Path

import numpy as np

from retrieval.app.duplicates.same_photo import can_turn, turned

logger = logging.getLogger(__name__)

CODES_DIR = "duplicate-codes"
"""The folder of code parts in an index folder (docs/formats.md)."""
LEGACY_FILE = "duplicate-codes.npz"
"""The single codes file of earlier versions, read as one part and removed by the next merge."""
MAX_PARTS = 8
"""Parts kept before they are merged into one."""
QUERY_TURNS = (0, 1, 2)
"""Quarter turns of each photo's code compared with the others' upright codes (0, 90 and 180 degrees)."""

ENCODE_CHUNK = 64
"""Photos encoded between two progress calls."""


class CodeSpace:
    """The codes of one index's photos for candidate search (module docstring).

    Parameters
    ----------
    searcher : :class:`retrieval.app.searcher.Searcher` (None to encode given features only)
    index_path : folder of the index (where the codes are kept)
    """

    def __init__(self, searcher, index_path):
        self.searcher = searcher
        self.index_path = Path(index_path)
        self.encoder = _generic_encoder()
        self._lock = threading.Lock()

    def encode(self, features: list) -> np.ndarray:
        """Unit-norm codes (n, D) float32 of ``features``."""
        V = np.asarray(self.encoder.encode(features), np.float32)
        return V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)

    def turned_codes(self, features, turns=QUERY_TURNS) -> np.ndarray:
        """Codes (len(turns), D) of one photo's features turned by each of ``turns`` (a photo whose features cannot
        be turned gets its upright code for every turn)."""
        ok = can_turn(features)
        return self.encode([turned(features, k) if ok else features for k in turns])

    def codes(self, ids, hashes, progress=None, sizes: dict | None = None) -> np.ndarray:
        """Codes (n, len(QUERY_TURNS), D) of indexed photos ``ids`` (content ``hashes``): the kept ones, the others
        encoded from their stored features and kept. ``sizes``: filled with ``{id: (w, h)}`` of the photos
        encoded."""
        from retrieval.core.threads import single_threaded_blas

        ids = [int(i) for i in ids]
        kept = self._load()
        missing = [j for j, h in enumerate(hashes) if h not in kept or kept[h][1] is None]
        with single_threaded_blas():       # one photo's small products (retrieval.core.threads)
            for n, j in enumerate(missing):
                f = self.searcher.features_of(ids[j])
                kept[hashes[j]] = (self.turned_codes(f).astype(np.float16), tuple(int(v) for v in f.image_size))
                if progress is not None and (n + 1 == len(missing) or n % ENCODE_CHUNK == 0):
                    progress(n + 1, len(missing))
        if missing:
            self._save(kept, [hashes[j] for j in missing], set(hashes))
        if sizes is not None:
            sizes.update({i: kept[h][1] for i, h in zip(ids, hashes, strict=True)})
        if not hashes:
            return np.zeros((0, len(QUERY_TURNS), 1), np.float32)
        return np.stack([kept[h][0] for h in hashes]).astype(np.float32)

    def lookup(self, ids, hashes) -> tuple[np.ndarray, np.ndarray | None]:
        """``(codes, mean)`` for a search, which never writes to the index: the codes (n, len(QUERY_TURNS), D)
        float32 of indexed photos ``ids`` (content ``hashes``), the kept ones read, the others encoded from their
        stored features and not kept; ``mean`` (D,) float32: the mean upright code of every kept photo (the centre
        :func:`centred` takes; None when none is kept)."""
        kept = self._load()
        out = []
        for i, h in zip(ids, hashes, strict=True):
            c = kept.get(h)
            out.append(c[0] if c is not None else self.turned_codes(self.searcher.features_of(int(i))))
        mean = None
        if kept:
            mean = np.mean(np.stack([c[0][0] for c in kept.values()]).astype(np.float32), axis=0)
        if not out:
            return np.zeros((0, len(QUERY_TURNS), 1), np.float32), mean
        return np.stack(out).astype(np.float32), mean

    # --------------------------------------------------------------------------------------- kept codes
    def _load(self) -> dict:
        return CodeParts(self.index_path, _key(self.encoder)).load()

    def _save(self, kept: dict, new: list, live: set) -> None:
        with self._lock:
            CodeParts(self.index_path, _key(self.encoder)).add({h: kept[h] for h in new}, live=live)


def _key(encoder) -> str:
    from retrieval.app.generic_models import model_key

    return model_key(encoder.preset)


def codes_key() -> str:
    """The model key the kept codes are written under (ValueError when the generic model is missing)."""
    return _key(_generic_encoder())


class CodeParts:
    """The kept codes of one index folder: ``INDEX/duplicate-codes/part-*.npz``, each written once (atomically) with
    the codes of the photos one sync or run encoded (format in docs/formats.md). Reading merges every part of the
    current model key (a later part wins); a part of another key, or unreadable, is skipped (its photos are encoded
    again) and dropped by the next merge.

    Parameters
    ----------
    index_path : the index folder
    key : model key of the generic model the codes come from
    """

    def __init__(self, index_path, key: str):
        self.folder = Path(index_path) / CODES_DIR
        self.legacy = Path(index_path) / LEGACY_FILE
        self.key = str(key)

    def parts(self) -> list[Path]:
        """The part files, oldest first (the legacy single file first of all)."""
        found = sorted(self.folder.glob("part-*.npz")) if self.folder.is_dir() else []
        return ([self.legacy] if self.legacy.is_file() else []) + found

    def _read(self, path: Path, hashes_only: bool = False) -> dict:
        try:
            with np.load(path, allow_pickle=False) as z:
                header = json.loads(bytes(z["header"]).decode("utf-8"))
                if header.get("model_key") != self.key or header.get("turns") != list(QUERY_TURNS):
                    return {}
                if hashes_only:
                    return dict.fromkeys(str(h) for h in z["hashes"])
                return {str(h): (c, (int(s[0]), int(s[1])))
                        for h, c, s in zip(z["hashes"], z["codes"], z["sizes"], strict=True)}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            logger.warning("%s: unreadable (%s); its photos' codes are computed again", path, exc)
            return {}

    def load(self, hashes_only: bool = False) -> dict:
        """``{hash: (codes (T, D) float16, (w, h))}`` of every readable part (``{hash: None}`` with ``hashes_only``)."""
        kept: dict = {}
        for path in self.parts():
            kept.update(self._read(path, hashes_only))
        return kept

    def _write(self, codes: dict) -> Path:
        import io
        import os
        import time

        from retrieval.core.persistence import atomic_write

        hashes = sorted(codes)
        buf = io.BytesIO()
        header = json.dumps({"format": "retrieval-duplicate-codes", "version": 2, "model_key": self.key,
                             "turns": list(QUERY_TURNS)})
        np.savez(buf, hashes=np.array(hashes, dtype="U32"),
                 codes=np.stack([codes[h][0] for h in hashes]).astype(np.float16),
                 sizes=np.array([codes[h][1] for h in hashes], np.int64).reshape(-1, 2),
                 header=np.frombuffer(header.encode("utf-8"), np.uint8))
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"part-{time.time_ns():020d}-{os.getpid()}-{threading.get_ident() % 10**6:06d}.npz"
        with atomic_write(path) as fh:
            fh.write(buf.getvalue())
        return path

    def add(self, codes: dict, live: set | None = None) -> None:
        """Keep ``codes`` (``{hash: (codes, (w, h))}``) as one new part; then, when more than :data:`MAX_PARTS`
        exist, merge them into one, keeping only the hashes of ``live`` when given (the photos still indexed)."""
        if codes:
            self._write(codes)
        parts = self.parts()
        if len(parts) <= MAX_PARTS:
            return
        kept: dict = {}
        for path in parts:
            kept.update(self._read(path))
        if live is not None:
            kept = {h: v for h, v in kept.items() if h in live}
        if kept:
            self._write(kept)
        for path in parts:           # only the parts read: one written meanwhile by another process stays
            path.unlink(missing_ok=True)


def keep_codes(index_path, store, config_key: str, hashes) -> int:
    """Encode the codes of the photos ``hashes`` (their features in ``store`` under ``config_key``) and keep them as
    one part: what a sync calls for the photos it adds (it reads none of the kept parts: a hash kept twice costs a
    few bytes until the next merge). Returns how many were encoded (0 when the generic model is missing: a
    duplicates run then says so)."""
    from retrieval.core.threads import single_threaded_blas

    try:
        space = CodeSpace(None, index_path)
    except ValueError:
        return 0
    parts = CodeParts(index_path, _key(space.encoder))
    todo = sorted({str(h) for h in hashes})
    new = {}
    with single_threaded_blas():       # one photo's small products (retrieval.core.threads)
        for h in todo:
            f = store.get(h, config_key)
            if f is not None:
                new[h] = (space.turned_codes(f).astype(np.float16), tuple(int(v) for v in f.image_size))
    parts.add(new)
    return len(new)


def _generic_encoder():
    """The global backend of the package's generic ``default`` model (ValueError when set-up did not make it)."""
    from retrieval.app.generic_models import generic_model
    from retrieval.engine.pipeline import make_backend
    from retrieval.engine.presets import load_preset

    preset = load_preset("default")
    folder = generic_model(preset)
    if folder is None:
        raise ValueError("the object presets find duplicates with the package's generic 'default' model, which is "
                         "missing: run 'make setup' (or 'python scripts/train_generic_models.py').")
    backend = make_backend(preset)
    backend.load_model(folder, json.loads((folder / "model.json").read_text("utf-8")))
    return backend


def centred(codes: np.ndarray, mean: np.ndarray | None = None) -> np.ndarray:
    """Codes (n, T, D) minus ``mean`` (default: the mean of their upright codes), rows unit-normed again: the
    component every photo shares removed, similarities spread out."""
    if len(codes) == 0:
        return codes
    mu = codes[:, 0].mean(axis=0) if mean is None else mean
    out = codes - mu
    return out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
