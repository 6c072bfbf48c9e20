"""On-disk cache of extracted features, keyed by image content hash and extractor configuration.

Layout (format ``retrieval-features``, version 1; docs/formats.md)::

    FOLDER/<config_key>/config.json              the extractor configuration (JSON)
    FOLDER/<config_key>/<h[:2]>/<h>.npz          one image: frames (n, 6) float32, descriptors (n, d),
                                                 image_size (2,) int64, __header__ (uint8 UTF-8 JSON)

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
import zipfile
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write, write_json_atomic
from retrieval.features.extractor import config_key as _config_key
from retrieval.features.types import LocalFeatures

logger = logging.getLogger(__name__)

STORE_FORMAT = "retrieval-features"
STORE_FORMAT_VERSION = 1


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

    def __contains__(self, key) -> bool:
        content_hash, config_key = key
        return self.entry_path(content_hash, config_key).is_file()

    def put(self, content_hash: str, features: LocalFeatures, config_key: str | None = None) -> Path:
        """Store ``features`` (atomically); ``config_key`` defaults to the key of ``features.config``."""
        key = _config_key(features.config) if config_key is None else config_key
        path = self.entry_path(content_hash, key)
        cfg_path = self.folder / key / "config.json"
        if not cfg_path.exists():
            write_json_atomic(cfg_path, features.config)
        return _write_entry(path, features, float16=self.float16, config_key=key, content_hash=content_hash)

    def get(self, content_hash: str, config_key: str, default=None):
        """The stored :class:`LocalFeatures`, or ``default`` when absent.

        A corrupt entry (e.g. a file damaged outside the library) is logged, removed and reported absent.
        """
        path = self.entry_path(content_hash, config_key)
        if not path.is_file():
            return default
        try:
            with np.load(path, allow_pickle=False) as z:
                header = json.loads(bytes(z["__header__"]).decode("utf-8"))
                frames = z["frames"]
                desc = z["descriptors"]
                size = tuple(int(v) for v in z["image_size"])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            logger.warning("removing corrupt feature-store entry %s (%s)", path, exc)
            path.unlink(missing_ok=True)
            return default
        if header.get("format") != STORE_FORMAT or header.get("config_key") != config_key:
            return default
        if desc.dtype == np.float16:
            desc = desc.astype(np.float32)
        return LocalFeatures(frames=frames, descriptors=desc, image_size=size, config=header.get("config", {}))

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
    buf = io.BytesIO()
    np.savez(buf, frames=np.asarray(features.frames, dtype=np.float32), descriptors=desc,
             image_size=np.asarray(features.image_size, dtype=np.int64),
             __header__=np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8))
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())
    return path


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
