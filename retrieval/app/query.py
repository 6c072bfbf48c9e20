"""A query, built once: :class:`Query` (its features, its box, its source) and :func:`make_query`.

Every search path takes a :class:`Query`: ``Index.search``, the server's searches and match view, ``retrieval
match --index`` and the sideways fallback. Its box is parsed, checked, clipped to the oriented image and its
features selected in one place (:func:`retrieval.rerank.boxes.query_region`).

An indexed image named by path or id is answered from the feature store, unless its file changed since it was
indexed (size or modification time, then content hash): then its current content is used, with a warning; a file
deleted since it was indexed is answered from the stored features, with a warning.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from retrieval.app.index_support import file_stat
from retrieval.features.store import file_hash
from retrieval.features.types import LocalFeatures
from retrieval.rerank.boxes import query_region

logger = logging.getLogger("retrieval.app.index")

__all__ = ["Query", "make_query", "query_features"]


@dataclass(frozen=True)
class Query:
    """One query.

    Attributes
    ----------
    features : LocalFeatures — the features searched (those inside the box for a box query)
    box : (x1, y1, x2, y2) — the query region in pixels of the oriented image (the whole image without a box)
    whole : bool — no box was given
    all_features : LocalFeatures — every feature of the query image
    row : dict or None — the catalog row when the query is an indexed image whose file did not change
    path : str or None — the query's image file (None for features given directly)
    image_id : int or None — the id the query was given by
    loaded : LoadedImage or None — the query image's working image when it was decoded already (an upload checked
        by the server): the sideways fallback turns it instead of decoding the file again
    """

    features: LocalFeatures
    box: tuple[float, float, float, float]
    whole: bool
    all_features: LocalFeatures
    row: dict | None = None
    path: str | None = None
    image_id: int | None = None
    loaded: object | None = None

    @classmethod
    def from_features(cls, features: LocalFeatures, bbox=None, *, row=None, path=None, image_id=None,
                      loaded=None) -> Query:
        """A query of ``features`` restricted to ``bbox`` (:func:`retrieval.rerank.boxes.query_region`)."""
        inside, box = query_region(features, bbox)
        return cls(inside, box, bbox is None, features, row, path, image_id, loaded)


def _changed_since_indexed(row) -> bool:
    """Size and mtime as indexed: unchanged; otherwise compare the content hash (a touched file is not changed)."""
    try:
        if tuple(file_stat(row["path"])) == (row["size"], row["mtime"]):
            return False
        return file_hash(row["path"]) != row["hash"]
    except OSError:
        return False


def query_features(image, *, catalog, store, extractor, index_path) -> tuple[LocalFeatures, dict | None]:
    """Features of a query: an indexed image (path or id; from the feature store) or any image file.

    Returns (LocalFeatures, catalog row or None); the row is None when the query is not an indexed image, or when
    its file changed since it was indexed (its current content is then described).
    """
    row = None
    if isinstance(image, (int, np.integer)) or (isinstance(image, str) and image.isdigit()
                                                 and not os.path.exists(image)):
        image_id = int(image)
        row = catalog.row_by_id(image_id)
        if row is None:
            raise ValueError(f"no image with id {image} in the index {index_path}.")
    else:
        p = os.path.abspath(os.path.expanduser(str(image)))
        row = catalog.row_by_path(p)
        if row is None and not os.path.isfile(p):
            raise FileNotFoundError(f"query image {str(image)!r} does not exist.")
    if row is not None and row["status"] == "indexed":
        if not os.path.isfile(row["path"]):
            logger.warning("%s was deleted since it was indexed: searching with its indexed content", row["path"])
        elif _changed_since_indexed(row):
            logger.warning("%s changed since it was indexed: searching with its current content (run "
                           "'retrieval index' to update the index)", row["path"])
            return extractor(row["path"]), None
        # the exact features when stored; a photo whose store entry is compact (retrieval.features.compact) is
        # described again from its file, and searched with the compact form only when the file is gone
        if store.has_full(row["hash"], extractor.config_key) or not os.path.isfile(row["path"]):
            f = store.get(row["hash"], extractor.config_key)
            if f is not None:
                return f, row
        else:
            return extractor(row["path"]), row
        if not os.path.isfile(row["path"]):
            raise ValueError(f"indexed image {row['path']!r}: its features are missing from the store and "
                             f"the file is gone; run 'retrieval index' again.")
        return extractor(row["path"]), row
    path = row["path"] if row is not None else os.path.abspath(os.path.expanduser(str(image)))
    return extractor(path), None


def make_query(image, bbox=None, *, catalog, store, extractor, index_path) -> Query:
    """The :class:`Query` of an indexed image (path or id), any image file, or :class:`LocalFeatures`, optionally
    restricted to ``bbox`` (``"x1,y1,x2,y2"`` or 4 numbers, pixels of the original image after EXIF orientation)."""
    if isinstance(image, LocalFeatures):
        return Query.from_features(image, bbox)
    feats, row = query_features(image, catalog=catalog, store=store, extractor=extractor, index_path=index_path)
    if row is not None:
        path = row["path"]
    elif isinstance(image, (int, np.integer)) or (isinstance(image, str) and image.isdigit()
                                                   and not os.path.exists(image)):
        r = catalog.row_by_id(int(image))
        path = r["path"] if r is not None else None
    else:
        path = os.path.abspath(os.path.expanduser(str(image)))
    image_id = int(image) if isinstance(image, (int, np.integer)) else (row["id"] if row is not None else None)
    return Query.from_features(feats, bbox, row=row, path=path, image_id=image_id)
