"""INRIA Copydays (Douze et al. 2009): mAP per transformation family.

Layout of the release: ``original/<n>.jpg`` (157 originals, numbered like Holidays: block = n // 100),
transformed copies ``crops/<percent>/<n>.jpg``, ``jpegqual/<quality>/<n>.jpg`` and ``strong/<n>.jpg``. Each
transformed image is a query; its positives are the originals of the same block in the database (originals plus
distractors, e.g. Flickr images); AP is the trapezoidal AP of :mod:`retrieval.evaluation.ap`. A family is the
folder of the query (``crops/50``, ``jpegqual/10``, ``strong``); the score of a family is the mean AP of its queries.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from retrieval.evaluation.ap import average_precision


def family_of(query: str) -> str:
    """Transformation family of a query name (its folder, POSIX form)."""
    parent = PurePosixPath(query).parent.as_posix()
    if parent in ("", "."):
        raise ValueError(f"Copydays query {query!r} has no family folder (expected e.g. 'crops/50/200000.jpg').")
    return parent


def block_of(name: str) -> int:
    """Copydays block of an image name (``number // 100``)."""
    stem = PurePosixPath(name).stem
    if not stem.isdigit():
        raise ValueError(f"Copydays image name {name!r} is not '<number>.jpg'.")
    return int(stem) // 100


def score_copydays(rankings: dict, originals, database=None) -> dict:
    """mAP per family.

    Parameters
    ----------
    rankings : dict str -> sequence of str
        Query name (``family/.../<n>.jpg``) -> database names best first.
    originals : iterable of str
        The original images in the database (``original/<n>.jpg``).
    database : set of str or None
        Every database name (originals + distractors); unknown names are errors when given.

    Returns
    -------
    dict
        ``{"per_family": {family: mAP}, "per_query": {query: AP}, "mAP": mean over families}``.
    """
    by_block = {}
    for o in originals:
        by_block.setdefault(block_of(o), set()).add(o)
    known = None if database is None else set(database) | set().union(*by_block.values())
    per_query, fam = {}, {}
    for q, ranked in rankings.items():
        positives = by_block.get(block_of(q))
        if not positives:
            raise ValueError(f"query {q!r}: no original of block {block_of(q)} in the database.")
        if known is not None:
            for n in ranked:
                if n not in known:
                    raise ValueError(f"results of query {q}: unknown image {n!r}.")
        ap = average_precision(list(ranked), positives)
        per_query[q] = ap
        fam.setdefault(family_of(q), []).append(ap)
    per_family = {f: sum(v) / len(v) for f, v in sorted(fam.items())}
    m = sum(per_family.values()) / len(per_family) if per_family else float("nan")
    return {"per_family": per_family, "per_query": per_query, "mAP": m}
