"""The one result record of every search: :class:`Hit`, from a backend's first stage through spatial re-ranking
to :meth:`retrieval.app.index.Index.search` and ``retrieval query``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Hit:
    """One ranked search result.

    Attributes
    ----------
    id : int
        Image id (the catalog's ``images.id`` in an index; the caller's id for
        :class:`retrieval.engine.object_search.ObjectSearcher`).
    score : float
        The ranking score. For the backends and :meth:`Index.search <retrieval.app.index.Index.search>`, higher
        is better: the inner product of unit vectors (``global``), minus the asymmetric or ADC distance
        (``binary``, codes-only ``global``), minus the dissimilarity (``object``). ``ObjectSearcher.search``
        itself reports the dissimilarity (smaller is better), which the object backend negates.
    inliers : int or None
        Spatially verified inliers (counted one-to-one) when the hit went through spatial re-ranking, else None.
    box : tuple of 4 float or None
        The matched region ``(x1, y1, x2, y2)`` in the result image (original pixels after EXIF orientation),
        when verified.
    rank : int or None
        1 = best; set by :meth:`Index.search <retrieval.app.index.Index.search>`.
    path : str or None
        Absolute path of the indexed image; set by :meth:`Index.search <retrieval.app.index.Index.search>`.
    """

    id: int
    score: float
    inliers: int | None = None
    box: tuple[float, float, float, float] | None = None
    rank: int | None = None
    path: str | None = None

    def to_json(self) -> dict:
        """The ``retrieval query --json`` object (docs/formats.md): ``rank``, ``path``, ``score`` (6 decimals), and
        ``inliers`` / ``box`` (1 decimal) only when they are set."""
        out = {"rank": self.rank, "path": self.path, "score": round(float(self.score), 6)}
        if self.inliers is not None:
            out["inliers"] = int(self.inliers)
        if self.box is not None:
            out["box"] = [round(float(v), 1) for v in self.box]
        return out
