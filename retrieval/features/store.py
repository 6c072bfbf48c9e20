"""On-disk cache of extracted features, keyed by image content hash and extractor configuration.

Layout (format ``retrieval-features``; docs/formats.md)::

    FOLDER/<config_key>/config.json              the extractor configuration (JSON)
    FOLDER/<config_key>/<h[:2]>/<h>.npz          one image in full (version 1): frames (n, 6) float32,
                                                 descriptors (n, d), image_size (2,) int64, __header__ (JSON)
    FOLDER/<config_key>/<h[:2]>/<h>.c.npz        one image in compact form (version 2): xy (n, 2) uint16,
                                                 shape (n, 4) float16, codes (n, 16) uint8, image_size, __header__
                                                 (with the digest of its codebook)
    FOLDER/<config_key>/<h[:2]>/<h>.e-<m>.npz    one image's verification evidence under the evidence model m
                                                 (version 3): words, signatures, centres, shapes, image_size,
                                                 __header__ (retrieval.rerank.evidence)
    FOLDER/<config_key>/codebooks/<digest>.npy   the descriptor codebooks compact entries name
    FOLDER/<config_key>/codebook.json            the codebook new compact entries use (the first one learnt)

The compact form (:mod:`retrieval.features.compact`: 28 bytes a feature against 152) is what the spatial verification
reads (:meth:`FeatureStore.get` with ``prefer="compact"``); the full form is what encoders read. An index writes the
compact form of the photos a sync adds before it publishes them, and drops their full form afterwards when the store
is its own (:meth:`FeatureStore.compact_entries`); a store given with ``--feature-store`` keeps both.

``h`` is :func:`file_hash` of the image file, ``config_key`` is ``FeatureExtractor.config_key``: a different
configuration never reads another's entries; the same image under another name shares the entry. Each entry is
written atomically (temporary file + rename), so an interrupted run leaves only complete entries and a re-run
resumes by skipping what is present.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
import zipfile
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write, write_json_atomic
from retrieval.features import compact
from retrieval.features.compact import (
    CODEBOOK_M,
    TRAINING_DESCRIPTORS,
    DescriptorCodebook,
    pack_frames,
    unpack_frames,
)
from retrieval.features.extractor import config_key as _config_key
from retrieval.features.types import LocalFeatures

logger = logging.getLogger(__name__)

STORE_FORMAT = "retrieval-features"
STORE_FORMAT_VERSION = 1
COMPACT_FORMAT_VERSION = 2
EVIDENCE_FORMAT_VERSION = 3
FORMS = ("full", "compact")


def file_hash(path, chunk_size: int = 1 << 20) -> str:
    """Content hash of a file: BLAKE2b with a 16-byte digest, as 32 lowercase hex digits."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk_size)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


class FeatureStore:
    """Features cached on disk by ``(content_hash, config_key)``.

    Parameters
    ----------
    folder : str or Path
        Created on first write.
    float16 : bool, default False
        Store floating-point descriptors (e.g. RootSIFT or PCA-reduced ones) as float16 (half the space;
        relative error < 1e-3); they are returned as float32. uint8 SIFT descriptors and frames are stored
        exactly (frames stay float32: float16 would lose sub-pixel positions beyond 2048 px).
    """

    def __init__(self, folder, *, float16: bool = False):
        self.folder = Path(folder)
        self.float16 = bool(float16)
        self._lock = threading.Lock()
        self._codebooks: dict = {}   # (config_key, digest) -> DescriptorCodebook: immutable files, read once

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.folder)!r}, float16={self.float16})"

    @staticmethod
    def _check_hash(content_hash: str) -> str:
        if not isinstance(content_hash, str) or len(content_hash) < 4 or not all(
                c in "0123456789abcdef" for c in content_hash):
            raise ValueError(f"content_hash must be a lowercase hex string (file_hash); got {content_hash!r}.")
        return content_hash

    def entry_path(self, content_hash: str, config_key: str) -> Path:
        """Path of the entry for ``(content_hash, config_key)``."""
        h = self._check_hash(content_hash)
        if not isinstance(config_key, str) or not config_key.isalnum():
            raise ValueError(f"config_key must be an alphanumeric string; got {config_key!r}.")
        return self.folder / config_key / h[:2] / f"{h}.npz"

    def compact_path(self, content_hash: str, config_key: str) -> Path:
        """Path of the compact entry for ``(content_hash, config_key)``."""
        full = self.entry_path(content_hash, config_key)
        return full.with_name(full.name[:-len(".npz")] + ".c.npz")

    def __contains__(self, key) -> bool:
        content_hash, config_key = key
        return self.entry_path(content_hash, config_key).is_file() or \
            self.compact_path(content_hash, config_key).is_file()

    def has_full(self, content_hash: str, config_key: str) -> bool:
        """Whether the full (exact) features of ``content_hash`` are stored (what encoders need)."""
        return self.entry_path(content_hash, config_key).is_file()

    def put(self, content_hash: str, features: LocalFeatures, config_key: str | None = None) -> Path:
        """Store ``features`` (atomically); ``config_key`` defaults to the key of ``features.config``."""
        key = _config_key(features.config) if config_key is None else config_key
        path = self.entry_path(content_hash, key)
        cfg_path = self.folder / key / "config.json"
        if not cfg_path.exists():
            write_json_atomic(cfg_path, features.config)
        return _write_entry(path, features, float16=self.float16, config_key=key, content_hash=content_hash)

    def get(self, content_hash: str, config_key: str, default=None, *, prefer: str = "full"):
        """The stored :class:`LocalFeatures`, or ``default`` when absent.

        ``prefer``: ``"full"`` (encoders: the exact features when stored, else the compact form decoded) or
        ``"compact"`` (the verification: the compact form when stored, so that a photo is verified the same before
        and after its full form is dropped). A corrupt entry (e.g. a file damaged outside the library) is logged,
        removed and reported absent.
        """
        if prefer not in FORMS:
            raise ValueError(f"prefer must be one of {FORMS}; got {prefer!r}.")
        readers = (self._get_full, self._get_compact)
        for read in (readers if prefer == "full" else readers[::-1]):
            got = read(content_hash, config_key)
            if got is not None:
                return got
        return default

    def _get_full(self, content_hash: str, config_key: str):
        got = _read_entry(self.entry_path(content_hash, config_key), config_key, ("frames", "descriptors"))
        if got is None:
            return None
        header, (frames, desc), size = got
        if desc.dtype == np.float16:
            desc = desc.astype(np.float32)
        return LocalFeatures(frames=frames, descriptors=desc, image_size=size, config=header.get("config", {}))

    def _get_compact(self, content_hash: str, config_key: str):
        path = self.compact_path(content_hash, config_key)
        got = _read_entry(path, config_key, ("xy", "shape", "codes"), COMPACT_FORMAT_VERSION)
        if got is None:
            return None
        header, (xy, shape, codes), size = got
        book = self._codebook(config_key, str(header.get("codebook", "")))
        if book is None:
            logger.warning("feature-store entry %s names codebook %r, which is missing or damaged", path,
                           header.get("codebook"))
            return None
        return LocalFeatures(frames=unpack_frames(xy, shape, size), descriptors=book.decode(codes), image_size=size,
                             config=header.get("config", {}))

    # ------------------------------------------------------------------ the compact form
    def codebook(self, config_key: str) -> DescriptorCodebook | None:
        """The descriptor codebook new compact entries of ``config_key`` use (None before one is learnt)."""
        pointer = self.folder / config_key / "codebook.json"
        try:
            digest = json.loads(pointer.read_text("utf-8"))["codebook"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self._codebook(config_key, str(digest))

    def _codebook(self, config_key: str, digest: str) -> DescriptorCodebook | None:
        """The codebook ``digest`` of ``config_key``, read once (an immutable file) and kept for this store's life."""
        if not digest.isalnum():
            return None
        with self._lock:
            book = self._codebooks.get((config_key, digest))
        if book is not None:
            return book
        path = self.folder / config_key / "codebooks" / f"{digest}.npy"
        try:
            book = DescriptorCodebook.from_bytes(path.read_bytes(), str(path))
        except (OSError, ValueError) as exc:
            logger.warning("descriptor codebook %s unreadable (%s)", path, exc)
            return None
        if book.digest != digest:
            logger.warning("descriptor codebook %s is damaged (its content does not match its name)", path)
            return None
        with self._lock:
            return self._codebooks.setdefault((config_key, digest), book)

    def learn_codebook(self, config_key: str, hashes, *, M: int = CODEBOOK_M) -> DescriptorCodebook | None:
        """The codebook of ``config_key``: the one already chosen, or one learnt from the full entries of
        ``hashes`` with ``M`` bytes of codes a descriptor (None when they hold fewer than ``MIN_TRAINING_DESCRIPTORS``
        uint8 descriptors). The first codebook a store learns stays its codebook, whatever ``M`` later. Two writers
        learning at once both keep their codebook file; the first to name it in ``codebook.json`` wins."""
        book = self.codebook(config_key)
        if book is not None:
            return book
        sample = self._training_sample(config_key, list(hashes))
        if sample is None:
            return None
        book = DescriptorCodebook.learn(sample, M=M)
        folder = self.folder / config_key
        path = folder / "codebooks" / f"{book.digest}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as fh:
            fh.write(book.to_bytes())
        tmp = folder / f"codebook.json.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps({"codebook": book.digest}) + "\n", "utf-8")
        try:
            os.link(tmp, folder / "codebook.json")   # exclusive: fails when another writer named one first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return self.codebook(config_key)

    def _training_sample(self, config_key: str, hashes: list) -> np.ndarray | None:
        """Up to :data:`TRAINING_DESCRIPTORS` uint8 descriptors spread over the full entries of ``hashes`` (at most
        512 of them, evenly spaced)."""
        if len(hashes) > 512:
            hashes = [hashes[i] for i in np.linspace(0, len(hashes) - 1, 512).astype(int)]
        parts = []
        for h in hashes:
            f = self._get_full(h, config_key)
            if f is not None and len(f) and f.descriptors.dtype == np.uint8:
                parts.append(f.descriptors)
        n = sum(len(p) for p in parts)
        if n < compact.MIN_TRAINING_DESCRIPTORS:
            return None
        step = max(1, n // TRAINING_DESCRIPTORS)
        return np.concatenate([p[::step] for p in parts])

    def put_compact(self, content_hash: str, features: LocalFeatures, config_key: str,
                    codebook: DescriptorCodebook) -> Path:
        """Write the compact entry of ``features`` with ``codebook`` (atomically)."""
        xy, shape = pack_frames(features.frames, features.image_size)
        header = {"format": STORE_FORMAT, "format_version": COMPACT_FORMAT_VERSION, "config_key": config_key,
                  "content_hash": content_hash, "codebook": codebook.digest, "config": features.config}
        return _write_npz(self.compact_path(content_hash, config_key), header, xy=xy, shape=shape,
                          codes=codebook.encode(features.descriptors), image_size=features.image_size)

    def compact_entries(self, config_key: str, hashes, *, learn_from=None, M: int = CODEBOOK_M) -> int:
        """Write the compact form of the full entries of ``hashes`` that lack one (the codebook learnt first from
        ``learn_from``, default ``hashes``, when the store has none); returns how many were written (0 when there is
        no codebook yet, or the descriptors are not uint8 SIFT)."""
        hashes = list(dict.fromkeys(hashes))
        book = self.learn_codebook(config_key, hashes if learn_from is None else learn_from, M=M)
        if book is None:
            return 0
        done = 0
        for h in hashes:
            if self.compact_path(h, config_key).is_file():
                continue
            f = self._get_full(h, config_key)
            if f is None or f.descriptors.dtype != np.uint8 or f.descriptors.shape[1] != book.dim:
                continue
            self.put_compact(h, f, config_key, book)
            done += 1
        return done

    def drop_full(self, config_key: str, hashes) -> int:
        """Remove the full entries of ``hashes`` that have a compact one; returns how many were removed."""
        dropped = 0
        for h in dict.fromkeys(hashes):
            full = self.entry_path(h, config_key)
            if full.is_file() and self.compact_path(h, config_key).is_file():
                full.unlink(missing_ok=True)
                dropped += 1
        return dropped

    def entry_bytes(self, content_hash: str, config_key: str, form: str = "compact") -> int:
        """Bytes on disk of one entry in ``form`` ("compact" falls back to the full entry when there is no compact
        one; 0 when absent)."""
        paths = [self.compact_path(content_hash, config_key)] if form == "compact" else []
        paths.append(self.entry_path(content_hash, config_key))
        for p in paths:
            try:
                return p.stat().st_size
            except OSError:
                continue
        return 0

    # ------------------------------------------------------------------ verification evidence
    def evidence_path(self, content_hash: str, config_key: str, model_key: str) -> Path:
        """Path of the verification evidence of ``content_hash`` computed with the evidence model ``model_key``
        (:mod:`retrieval.rerank.evidence`): ``<h>.e-<model_key>.npz`` beside the image's other entries."""
        if not isinstance(model_key, str) or not model_key.isalnum():
            raise ValueError(f"model_key must be an alphanumeric string; got {model_key!r}.")
        full = self.entry_path(content_hash, config_key)
        return full.with_name(f"{full.name[:-len('.npz')]}.e-{model_key}.npz")

    def put_evidence(self, content_hash: str, config_key: str, model_key: str, arrays: dict) -> Path:
        """Write an image's evidence (its arrays, ``image_size`` among them) atomically."""
        arrays = dict(arrays)
        size = arrays.pop("image_size")
        header = {"format": STORE_FORMAT, "format_version": EVIDENCE_FORMAT_VERSION, "config_key": config_key,
                  "content_hash": content_hash, "evidence_model": model_key}
        return _write_npz(self.evidence_path(content_hash, config_key, model_key), header, image_size=size, **arrays)

    def get_evidence(self, content_hash: str, config_key: str, model_key: str, names) -> dict | None:
        """The arrays ``names`` (and ``image_size``) of an image's evidence; None when absent or damaged (a damaged
        entry is logged and removed)."""
        path = self.evidence_path(content_hash, config_key, model_key)
        got = _read_entry(path, config_key, names, EVIDENCE_FORMAT_VERSION)
        if got is None:
            return None
        header, arrays, size = got
        if header.get("evidence_model") != model_key:
            return None
        return {**dict(zip(names, arrays, strict=True)), "image_size": np.asarray(size, np.int64)}

    def save_file(self, path, features: LocalFeatures) -> Path:
        """Alias of :func:`save_features` (one entry written to an arbitrary path)."""
        return save_features(path, features, float16=self.float16)

    def get_or_extract(self, path, extractor) -> LocalFeatures:
        """Features of the image file ``path`` by ``extractor``, from the store or extracted and stored."""
        h = file_hash(path)
        got = self.get(h, extractor.config_key)
        if got is None:
            got = extractor(path)
            self.put(h, got, extractor.config_key)
        return got


def save_features(path, features: LocalFeatures, *, float16: bool = False) -> Path:
    """Write one :class:`LocalFeatures` to ``path`` (``.npz``, the store's entry format) atomically."""
    return _write_entry(Path(path), features, float16=float16, config_key=_config_key(features.config))


def _write_entry(path: Path, features: LocalFeatures, *, float16: bool, config_key: str,
                 content_hash: str | None = None) -> Path:
    """The store's ``.npz`` entry (frames, descriptors, image size and a JSON header), written atomically."""
    desc = features.descriptors
    if float16 and desc.dtype.kind == "f":
        desc = desc.astype(np.float16)
    header = {"format": STORE_FORMAT, "format_version": STORE_FORMAT_VERSION, "config_key": config_key}
    if content_hash is not None:
        header["content_hash"] = content_hash
    header["config"] = features.config
    return _write_npz(path, header, frames=np.asarray(features.frames, dtype=np.float32), descriptors=desc,
                      image_size=features.image_size)


def _write_npz(path: Path, header: dict, *, image_size, **arrays) -> Path:
    """One store entry: ``arrays``, the image size and the JSON ``header`` in an ``.npz``, written atomically."""
    buf = io.BytesIO()
    np.savez(buf, **arrays, image_size=np.asarray(image_size, dtype=np.int64),
             __header__=np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8))
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())
    return path


def _read_entry(path: Path, config_key: str, names, version: int | None = None):
    """``(header, arrays named names, image size)`` of the store entry ``path``; None when absent, of another format,
    configuration or (given) version, or damaged (logged and removed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["__header__"]).decode("utf-8"))
            arrays = tuple(z[n] for n in names)
            size = tuple(int(v) for v in z["image_size"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        logger.warning("removing corrupt feature-store entry %s (%s)", path, exc)
        path.unlink(missing_ok=True)
        return None
    if header.get("format") != STORE_FORMAT or header.get("config_key") != config_key or \
            (version is not None and header.get("format_version") != version):
        return None
    return header, arrays, size


def load_features(path) -> LocalFeatures:
    """Read a file written by :func:`save_features` (or a store entry)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["__header__"]).decode("utf-8"))
            frames, desc = z["frames"], z["descriptors"]
            size = tuple(int(v) for v in z["image_size"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a features file ({exc}).") from None
    if header.get("format") != STORE_FORMAT:
        raise ValueError(f"{path}: format {header.get('format')!r}, expected {STORE_FORMAT!r}.")
    if desc.dtype == np.float16:
        desc = desc.astype(np.float32)
    return LocalFeatures(frames=frames, descriptors=desc, image_size=size, config=header.get("config", {}))
