"""INRIA Holidays scoring with the semantics of Jegou's official ``holidays_map.py``.

Ground truth: ``holidays_images.dat``, one image name per line (1491 names); an image whose number is a multiple of
100 is a query (500 queries) and the following names up to the next query are its positives (group =
``number // 100``).

Results file (``holidays_map.py`` format), one line per query::

    query.jpg rank_0 name_0 rank_1 name_1 ...

Scoring, exactly as the official script: the pairs of a line are sorted by (rank, name) and the ranks are used
as given; when the query itself appears in its own list it is skipped and every later rank is shifted by -1;
AP is the trapezoidal AP (:func:`retrieval.evaluation.ap.ap_from_ranks`, ``score_ap_from_ranks_1``); the mAP is the
mean over the queries present in the file (missing queries give a warning, as in the official tool) and is printed
with 5 decimals: ``mAP for FILE: 0.xxxxx``.

Stricter than the official script (which would silently count them): an image name listed twice in one line is an
error. An unknown query or returned image is an error in both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from retrieval.core.persistence import atomic_write
from retrieval.evaluation.ap import ap_from_ranks

logger = logging.getLogger(__name__)


@dataclass
class HolidaysGroundTruth:
    """``names``: every image name (list, file order); ``positives``: query name -> set of positive names."""

    names: list
    positives: dict

    @property
    def queries(self) -> list:
        return list(self.positives)


def image_number(name: str) -> int:
    """Holidays image number from a name such as ``100301.jpg`` (``ValueError`` otherwise)."""
    stem = Path(name).stem
    if not stem.isdigit():
        raise ValueError(f"Holidays image name {name!r} is not '<number>.jpg'.")
    return int(stem)


def parse_holidays_gt(lines) -> HolidaysGroundTruth:
    """Ground truth from the lines of ``holidays_images.dat`` (see the module docstring)."""
    names, positives, seen = [], {}, set()
    current = None
    for lineno, line in enumerate(lines, 1):
        name = line.strip()
        if not name:
            continue
        num = image_number(name)
        if name in seen:
            raise ValueError(f"holidays_images.dat line {lineno}: {name!r} listed twice.")
        seen.add(name)
        names.append(name)
        if num % 100 == 0:
            current = set()
            positives[name] = current
        elif current is None:
            raise ValueError(f"holidays_images.dat line {lineno}: {name!r} comes before any query (number % 100 == 0).")
        else:
            current.add(name)
    if not positives:
        raise ValueError("holidays_images.dat holds no query (a name whose number is a multiple of 100).")
    return HolidaysGroundTruth(names=names, positives=positives)


def load_holidays_gt(path) -> HolidaysGroundTruth:
    """Read the official ``holidays_images.dat``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file; expected the official holidays_images.dat.") from None
    return parse_holidays_gt(text.splitlines())


def parse_holidays_results(lines, *, source: str = "results") -> list:
    """Parse ``holidays_map.py`` result lines into ``[(query, [(rank, name), ...]), ...]`` (file order)."""
    out = []
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) % 2 != 1:
            raise ValueError(f"{source} line {lineno}: expected 'query rank name rank name ...'; "
                             f"got {len(fields)} fields (an odd number is required).")
        pairs = []
        for r, n in zip(fields[1::2], fields[2::2], strict=False):
            try:
                rank = int(r)
            except ValueError:
                raise ValueError(f"{source} line {lineno}: rank {r!r} is not an integer.") from None
            pairs.append((rank, n))
        out.append((fields[0], pairs))
    return out


@dataclass
class HolidaysScore:
    """``mAP`` over the scored queries, ``per_query`` AP, and the queries with no result line."""

    mAP: float
    per_query: dict
    missing: list

    def format(self, source: str) -> str:
        """The official line: ``mAP for <file>: %.5f``."""
        return f"mAP for {source}: {self.mAP:.5f}"

    def to_json(self) -> dict:
        return {"protocol": "holidays", "mAP": self.mAP, "per_query": dict(self.per_query),
                "missing_queries": list(self.missing)}


def score_holidays(results, gt: HolidaysGroundTruth) -> HolidaysScore:
    """Score parsed results (``[(query, [(rank, name), ...])]`` or a dict query -> ranked names) like ``holidays_map.py``.

    A dict value that is a plain list of names is read as ranks 0, 1, 2, ...
    """
    if isinstance(results, dict):
        items = []
        for q, lst in results.items():
            lst = list(lst)
            if lst and isinstance(lst[0], tuple):
                items.append((q, lst))
            else:
                items.append((q, list(enumerate(lst))))
        results = items
    known = set(gt.names)
    per_query = {}
    for query, pairs in results:
        if query not in gt.positives:
            raise ValueError(f"unknown query {query!r} (not a Holidays query: number % 100 == 0 in holidays_images.dat).")
        if query in per_query:
            raise ValueError(f"query {query!r} has two result lines.")
        positives = gt.positives[query]
        seen = set()
        tp_ranks = []
        shift = 0
        for rank, name in sorted(pairs):
            if name not in known:
                raise ValueError(f"image name {name} not in Holidays (results of query {query}).")
            if name in seen:
                raise ValueError(f"results of query {query}: image {name!r} appears twice; expected each image once.")
            seen.add(name)
            if name == query:
                shift = -1
            elif name in positives:
                tp_ranks.append(rank + shift)
        per_query[query] = ap_from_ranks(tp_ranks, len(positives))
    if not per_query:
        raise ValueError("no result line to score.")
    missing = [q for q in gt.positives if q not in per_query]
    if missing:
        logger.warning("no result for %d queries: %s%s", len(missing), ", ".join(missing[:5]),
                       " ..." if len(missing) > 5 else "")
    m = sum(per_query.values()) / len(per_query)
    return HolidaysScore(mAP=m, per_query=per_query, missing=missing)


def write_holidays_results(path, rankings: dict) -> None:
    """Write ``{query: [name, ...]}`` (best first) in the ``holidays_map.py`` format, atomically."""
    with atomic_write(path, "w") as fh:
        for q, names in rankings.items():
            fh.write(" ".join([q] + [f"{i} {n}" for i, n in enumerate(names)]) + "\n")
