"""Query crops with lists of true and false matches (the Oxford crops of ``../shared/data/real/oxford_crops``).

Layout: a folder of query images ``NAME.jpg`` (any image extension), each with ``NAME_TP.txt`` (one database image
name per line, extension optional: the images that show the query's object) and optionally ``NAME_FP.txt`` (images
that do not: hard negatives). The database is a separate folder of images.

Scoring, as the Oxford protocol treats junk (Philbin et al. 2007; Jegou et al. 2012, Sec. 5): when a query has a
false list, AP is computed over the true and false lists only, and every other database image is ignored (removed
from the ranked list, as "junk"); without a false list every image outside the true list is a negative. AP is the
trapezoidal AP of :mod:`retrieval.evaluation.ap`; the score is the mean over the queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retrieval.evaluation.ap import ap_from_ranks, check_ranked_list


@dataclass
class CropsBenchmark:
    """Loaded query lists.

    Attributes
    ----------
    queries : list of str
        Query names (``NAME`` of ``NAME_TP.txt``), sorted.
    query_files : dict str -> Path
        Image of each query.
    positives : dict str -> set of str
        Database image stems (file name without extension) showing the query's object.
    negatives : dict str -> set of str or None
        Database image stems that do not (None: every other image is a negative).
    """

    queries: list
    query_files: dict
    positives: dict
    negatives: dict


def _read_list(path: Path, extensions) -> set:
    names = set()
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if "/" in s or "\\" in s:
            raise ValueError(f"{path}:{i}: expected an image name, not a path; got {s!r}.")
        names.add(Path(s).stem if Path(s).suffix.lower() in extensions else s)
    return names


def load_crops(root, extensions) -> CropsBenchmark:
    """Read the query images and their lists from ``root``; ``ValueError`` naming the file when malformed.

    Parameters
    ----------
    root : path
        Folder of ``NAME.<ext>`` query images with ``NAME_TP.txt`` (and optionally ``NAME_FP.txt``).
    extensions : tuple of str
        Image extensions (lower case, with the dot): of the query images, and stripped from list entries.
    """
    root = Path(root)
    queries, files, pos, neg = [], {}, {}, {}
    for tp in sorted(root.glob("*_TP.txt")):
        name = tp.name[: -len("_TP.txt")]
        imgs = [p for p in sorted(root.glob(name + ".*")) if p.suffix.lower() in extensions]
        if not imgs:
            raise ValueError(f"{tp}: no query image {name}.<{'|'.join(e[1:] for e in extensions)}> beside it.")
        p = _read_list(tp, extensions)
        if not p:
            raise ValueError(f"{tp}: empty list; expected at least one true match.")
        fp = root / f"{name}_FP.txt"
        n = _read_list(fp, extensions) if fp.is_file() else None
        if n is not None and n & p:
            raise ValueError(f"{fp}: {sorted(n & p)[0]!r} is also in {tp.name}; an image is a true or a false "
                             "match, not both.")
        queries.append(name)
        files[name], pos[name], neg[name] = imgs[0], p, n
    if not queries:
        raise ValueError(f"{root}: no query list (NAME_TP.txt) found.")
    return CropsBenchmark(queries=queries, query_files=files, positives=pos, negatives=neg)


def score_crops(bench: CropsBenchmark, rankings: dict) -> dict:
    """mAP of one ranked list of database image stems per query (junk rule in the module docstring).

    Returns
    -------
    dict
        ``{"protocol": "crops", "mAP", "per_query": {query: AP}}``.
    """
    missing = [q for q in bench.queries if q not in rankings]
    if missing:
        raise ValueError(f"no ranked list for queries {', '.join(missing)}.")
    per_query = {}
    for q in bench.queries:
        ranked = list(rankings[q])
        check_ranked_list(ranked, where=f"results of query {q}")
        pos, neg = bench.positives[q], bench.negatives[q]
        ranks, r = [], 0
        for name in ranked:
            if name in pos:
                ranks.append(r)
            elif neg is not None and name not in neg:
                continue  # junk: neither a true nor a listed false match
            r += 1
        per_query[q] = ap_from_ranks(ranks, len(pos))
    return {"protocol": "crops", "mAP": sum(per_query.values()) / len(per_query), "per_query": per_query}
