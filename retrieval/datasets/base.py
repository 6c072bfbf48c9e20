"""The common shape of a benchmark dataset: database images, queries (optionally with a box), and a scorer.

Every loader (:mod:`.holidays`, :mod:`.oxford`, :mod:`.revisited`, :mod:`.ukb`, :mod:`.copydays`) checks its folder
against the manifest first (``FileNotFoundError`` listing exactly what is missing) and returns a
:class:`RetrievalDataset`. ``score(rankings)`` takes ``{query name: [database names, best first]}`` and applies the
official protocol; ``write_results(rankings, folder)`` writes the official tools' input files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Query:
    """A query: ``name`` (its key in rankings), ``path`` (image file), ``box`` (x1, y1, x2, y2) in original pixels
    or None, and ``image`` (its database name when the query image is also in the database, else None)."""

    name: str
    path: Path
    box: tuple | None = None
    image: str | None = None


@dataclass
class RetrievalDataset:
    """A loaded benchmark.

    Attributes
    ----------
    name : str
    root : Path
    database : list of str
        Database image names (keys used in rankings).
    paths : dict str -> Path
        File of each database image.
    queries : list of Query
    exclude_query : bool
        The query's own image is dropped from its ranked list before scoring (Holidays protocol).
    scorer : callable(rankings) -> dict with at least ``mAP`` and ``per_query``
    writer : callable(rankings, folder) -> list of Path, or None
    notes : list of str
        Protocol remarks surfaced in reports (e.g. the EXIF policy).
    """

    name: str
    root: Path
    database: list
    paths: dict
    queries: list
    exclude_query: bool = False
    scorer: object = None
    writer: object = None
    notes: list = field(default_factory=list)

    def score(self, rankings: dict) -> dict:
        """Official score of ``{query name: [database names best first]}``."""
        return self.scorer(rankings)

    def write_results(self, rankings: dict, folder) -> list:
        """Write the official result files into ``folder``; returns their paths ([] when no official format)."""
        if self.writer is None:
            return []
        return self.writer(rankings, Path(folder))
