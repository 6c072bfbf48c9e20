"""The query side of :class:`retrieval.app.index.Index` (a mixin): the features of a query image, and ``info``
(the index's summary).

An indexed image named by path or id is answered from the feature store, unless its file changed since it was
indexed (size or modification time, then content hash): then its current content is used, with a warning; a file
deleted since it was indexed is answered from the stored features, with a warning.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from retrieval.app.index_support import file_stat
from retrieval.features import parse_box, select_in_box, subset
from retrieval.features.store import file_hash
from retrieval.rerank.boxes import clip_box

logger = logging.getLogger("retrieval.app.index")


class QueryMixin:
    """``query_features``: an indexed image (path or id) or any image file; ``use_cluster``; ``info``."""

    def use_cluster(self, client) -> None:
        """Search a sharded index on the workers of a Dask ``client`` (:mod:`retrieval.app.cluster`): each shard
        is loaded by a worker from the (shared) index folder and kept in its memory; None: in this process."""
        self._search_client = client
        self._backend = None

    def query_features(self, image):
        """Features of a query: an indexed image (path or id; from the feature store) or any image file.

        Returns (LocalFeatures, catalog row or None); the row is None when the query is not an indexed image, or
        when its file changed since it was indexed (its current content is then described).
        """
        row = None
        if isinstance(image, (int, np.integer)) or (isinstance(image, str) and image.isdigit()
                                                     and not os.path.exists(image)):
            row = self.catalog.row_by_id(int(image))
            if row is None:
                raise ValueError(f"no image with id {image} in the index {self.path}.")
        else:
            p = os.path.abspath(os.path.expanduser(str(image)))
            row = self.catalog.row_by_path(p)
            if row is None and not os.path.isfile(p):
                raise FileNotFoundError(f"query image {str(image)!r} does not exist.")
        if row is not None and row["status"] == "indexed":
            if not os.path.isfile(row["path"]):
                logger.warning("%s was deleted since it was indexed: searching with its indexed content",
                               row["path"])
            elif self._changed_since_indexed(row):
                logger.warning("%s changed since it was indexed: searching with its current content (run "
                               "'retrieval index' to update the index)", row["path"])
                return self.extractor(row["path"]), None
            f = self.store.get(row["hash"], self.extractor.config_key)
            if f is not None:
                return f, row
            if not os.path.isfile(row["path"]):
                raise ValueError(f"indexed image {row['path']!r}: its features are missing from the store and "
                                 f"the file is gone; run 'retrieval index' again.")
            return self.extractor(row["path"]), row
        path = row["path"] if row is not None else os.path.abspath(os.path.expanduser(str(image)))
        return self.extractor(path), None

    @staticmethod
    def _restrict_to_box(feats, bbox):
        """(features inside ``bbox``, the box) for a box query, (all features, the whole image) without one. A box
        partly outside the image is clipped to it, with a warning; one entirely outside, inverted or empty, or with
        no feature inside, is a ValueError (one line)."""
        w, h = feats.image_size
        if bbox is None:
            return feats, (0.0, 0.0, float(w - 1), float(h - 1))
        box = parse_box(bbox)
        x1, y1, x2, y2 = box
        if x2 <= x1 or y2 <= y1:
            raise ValueError(f"box {bbox!r}: needs x2 > x1 and y2 > y1.")
        if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
            clipped = clip_box(box, (w, h))
            if clipped is None:
                raise ValueError(f"box {bbox!r} is outside the query image of size {w}x{h} (boxes are x1,y1,x2,y2 "
                                 f"in pixels of the original image after EXIF rotation).")
            logger.warning("box %s reaches outside the query image of size %dx%d: clipped to %s", bbox, w, h,
                           ",".join(f"{v:g}" for v in clipped))
            box = clipped
        mask = select_in_box(feats, box)
        if not mask.any():
            raise ValueError(f"no local features inside the box {bbox!r} of the query image: draw a larger box "
                             f"around a textured object.")
        return subset(feats, mask), box

    @staticmethod
    def _changed_since_indexed(row) -> bool:
        """Size and mtime as indexed: unchanged; otherwise compare the content hash (a touched file is not
        changed)."""
        try:
            if tuple(file_stat(row["path"])) == (row["size"], row["mtime"]):
                return False
            return file_hash(row["path"]) != row["hash"]
        except OSError:
            return False

    # ------------------------------------------------------------------ info
    def info(self) -> dict:
        """Summary: preset, model, counts by status, generation, last runs, folder size."""
        gen, rows = self.catalog.snapshot()
        counts = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        size = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        runs = self.catalog.runs()
        if runs and runs[-1]["status"] == "running" and not self._writer_active():
            runs[-1]["status"] = "interrupted"   # left 'running' by a killed process
        return {
            "index": str(self.path.resolve()),
            "preset": {"name": self.preset["name"], "version": self.preset["version"], "kind": self.preset["kind"]},
            "model": self.catalog.get_meta("model"),
            "generation": gen,
            "images": len(rows),
            "indexed": counts.get("indexed", 0),
            "errors": counts.get("error", 0),
            "error_files": [{"path": r["path"], "error": r["error"]} for r in rows if r["status"] == "error"],
            "roots": self.roots,
            "excluded": self.excluded,
            "bytes_on_disk": int(size),
            "runs": len(runs),
            "last_run": runs[-1] if runs else None,
        }
