"""Average precision in the trapezoidal form of the official benchmark tools.

Every official tool of the benchmarks we reproduce (Jegou's ``holidays_map.py``, the Oxford ``compute_ap.cpp``,
revisitop's ``compute_ap``) integrates the precision-recall curve with trapezoids: a true positive found at rank
``r`` (0-based, junk removed) after ``i`` earlier true positives adds

    (p0 + p1) / 2 * (1 / n_pos),   p0 = i / r  (p0 = 1 when r = 0),   p1 = (i + 1) / (r + 1)

where ``n_pos`` is the number of positives in the whole database (positives never retrieved contribute 0).
This is the "AP" of Jegou et al. 2012 (Sec. 5, mAP on Holidays and Oxford) and of Zhu et al. 2013 (Sec. 4).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import numpy as np


def check_ranked_list(ranked: Sequence[Hashable], *, known=None, where: str = "ranked list") -> None:
    """Raise ``ValueError`` if ``ranked`` names an image twice, or an image outside ``known`` (when given).

    Parameters
    ----------
    ranked : sequence of hashable
        Image identifiers, best first.
    known : container or None
        The database; membership is tested with ``in``.
    where : str
        How the list is named in the message (e.g. ``"results of query 100000.jpg"``).
    """
    seen = set()
    for pos, name in enumerate(ranked):
        if name in seen:
            raise ValueError(f"{where}: image {name!r} appears twice (again at position {pos}); "
                             "expected each database image at most once.")
        seen.add(name)
        if known is not None and name not in known:
            raise ValueError(f"{where}: unknown image {name!r} at position {pos}; expected a database image name.")


def ap_from_ranks(ranks: Iterable[int], n_positives: int) -> float:
    """Trapezoidal AP from the sorted 0-based ranks of the retrieved true positives.

    Exactly ``score_ap_from_ranks_1`` of ``holidays_map.py`` and ``compute_ap`` of revisitop, in double precision.

    Parameters
    ----------
    ranks : iterable of int
        Increasing 0-based ranks (junk already removed) of the true positives found in the list.
    n_positives : int
        Number of positives of the query in the whole database (>= 1).

    Returns
    -------
    float
        AP in [0, 1].
    """
    if n_positives <= 0:
        raise ValueError(f"n_positives must be >= 1 to define an AP; got {n_positives}.")
    ap = 0.0
    recall_step = 1.0 / n_positives
    for ntp, rank in enumerate(ranks):
        precision_0 = 1.0 if rank == 0 else ntp / float(rank)
        precision_1 = (ntp + 1) / float(rank + 1)
        ap += (precision_1 + precision_0) * recall_step / 2.0
    return ap


def positive_ranks(ranked: Sequence[Hashable], positives, junk=()) -> np.ndarray:
    """0-based ranks of the positives in ``ranked`` after removing junk (revisitop's rank shift).

    Returns
    -------
    ndarray of shape (n_found,), dtype int64
    """
    positives = set(positives)
    junk = set(junk) - positives if junk else set()
    out = []
    shift = 0
    for pos, name in enumerate(ranked):
        if name in junk:
            shift += 1
        elif name in positives:
            out.append(pos - shift)
    return np.asarray(out, dtype=np.int64)


def average_precision(ranked: Sequence[Hashable], positives, junk=(), *, check: bool = True) -> float:
    """Trapezoidal average precision of one ranked list (official Holidays / Oxford / revisitop form).

    Junk images are removed from the list before ranks are counted (they neither help nor hurt);
    positives missing from the list count as never retrieved. An image both positive and junk counts as positive.

    Parameters
    ----------
    ranked : sequence of hashable
        Database image identifiers, best first. Each at most once (``ValueError`` otherwise when ``check``).
    positives : iterable of hashable
        The query's positives (>= 1).
    junk : iterable of hashable
        Images ignored wherever they are ranked.
    check : bool
        Check ``ranked`` for duplicates.

    Returns
    -------
    float
        AP in [0, 1].

    Examples
    --------
    >>> round(average_precision(["a", "x", "b"], {"a", "b"}), 6)   # (1+1)/4 + (1/2 + 2/3)/4
    0.791667
    """
    positives = set(positives)
    if not positives:
        raise ValueError("average_precision needs at least one positive; got an empty set "
                         "(the official tools skip such queries: see retrieval.evaluation.revisited).")
    if check:
        check_ranked_list(ranked)
    return ap_from_ranks(positive_ranks(ranked, positives, junk), len(positives))


def precision_at_k(ranked: Sequence[Hashable], positives, junk=(), k: int = 10) -> float:
    """Precision at ``k`` with junk removed, in revisitop's form (``kq = min(max(pos), k)``).

    revisitop divides by ``min(k, rank of the last retrieved positive)`` (1-based), so a query whose positives are all
    found before ``k`` is not penalised; when no positive is in the list we return 0 (revisitop would fail).
    """
    pos = positive_ranks(ranked, positives, junk) + 1
    if pos.size == 0:
        return 0.0
    kq = min(int(pos.max()), int(k))
    return float(np.count_nonzero(pos <= kq)) / kq
