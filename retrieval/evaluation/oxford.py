"""Oxford5k / Paris6k scoring with the semantics of the official ``compute_ap.cpp`` (Philbin et al. 2007).

Ground truth: a folder of ``<query>_{query,good,ok,junk}.txt``; ``<query>_query.txt`` holds
``oxc1_<image> x1 y1 x2 y2`` (box in original pixels), the others one image name per line (duplicates allowed,
read as sets). Positives = good + ok; junk images are skipped wherever they appear (``compute_ap`` tests junk
first, so an image both junk and positive is skipped).

Results: one ranked list per query, image names best first (what ``compute_ap`` reads: one name per line). Names
are compared without a trailing ``.jpg``.

AP is the trapezoidal AP computed in the single-precision arithmetic of ``compute_ap.cpp`` (float recall and
precision, each step's term in double, the running sum stored as float), so the printed figures match the C++ tool
to its last digit: per-query AP as ``cout << ap`` prints it (6 significant digits, ``%.6g``), the mAP with 6 decimals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write
from retrieval.evaluation.ap import check_ranked_list


def normalize_name(name: str) -> str:
    """Strip surrounding whitespace and a trailing ``.jpg``."""
    name = name.strip()
    if name.lower().endswith(".jpg"):
        name = name[:-4]
    return name


@dataclass
class OxfordQuery:
    """One query: ``image`` (database name), ``box`` (x1, y1, x2, y2) float, and the good/ok/junk name sets."""

    name: str
    image: str
    box: tuple
    good: frozenset
    ok: frozenset
    junk: frozenset

    @property
    def positives(self) -> frozenset:
        return self.good | self.ok


def _read_list(path: Path) -> list:
    if not path.is_file():
        raise ValueError(f"ground-truth file {path} not found.")
    return [normalize_name(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_oxford_gt(folder) -> dict:
    """Read a ``gt_files`` folder into ``{query_name: OxfordQuery}`` (sorted by query name)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"ground-truth folder {folder} not found.")
    out = {}
    for qfile in sorted(folder.glob("*_query.txt")):
        qname = qfile.name[: -len("_query.txt")]
        fields = qfile.read_text(encoding="utf-8").split()
        if len(fields) != 5:
            raise ValueError(f"{qfile}: expected 'image x1 y1 x2 y2'; got {len(fields)} fields.")
        image = normalize_name(fields[0])
        if image.startswith("oxc1_"):  # Oxford query files prefix the image name; Paris ones do not
            image = image[len("oxc1_"):]
        try:
            box = tuple(float(v) for v in fields[1:])
        except ValueError:
            raise ValueError(f"{qfile}: box values must be numbers; got {fields[1:]}.") from None
        sets = {k: frozenset(_read_list(folder / f"{qname}_{k}.txt")) for k in ("good", "ok", "junk")}
        if not sets["good"] | sets["ok"]:
            raise ValueError(f"{qfile}: query {qname} has no positive (good + ok are empty).")
        out[qname] = OxfordQuery(name=qname, image=image, box=box, **sets)
    if not out:
        raise ValueError(f"{folder}: no '<query>_query.txt' file; expected the official gt_files folder.")
    return out


def compute_ap(positives, junk, ranked) -> np.float32:
    """AP of one ranked list exactly as ``compute_ap.cpp`` computes it (float32 state, double step terms).

    For every non-junk entry at position j (0-based, junk skipped) with ``t`` positives so far:
    ``recall = float(t) / float(|pos|)``, ``precision = float(t / (j + 1.0))``,
    ``ap += (recall - old_recall) * ((old_precision + precision) / 2.0)``, starting from
    ``old_recall = 0``, ``old_precision = 1``. Only positives change recall, so only they add to ``ap``.

    Parameters
    ----------
    positives, junk : set of str
    ranked : sequence of str
        Names, best first.

    Returns
    -------
    numpy.float32
    """
    f32 = np.float32
    npos = f32(len(positives))
    if npos == 0:
        raise ValueError("compute_ap needs at least one positive.")
    ap = f32(0.0)
    old_recall = f32(0.0)
    old_precision = f32(1.0)
    t = 0
    j = 0
    for name in ranked:
        if name in junk:
            continue
        if name in positives:
            t += 1
            recall = f32(f32(t) / npos)
            precision = f32(t / (j + 1.0))
            # the previous entry's precision (it was stored as a float at step j-1)
            prev_precision = old_precision if j == 0 else f32((t - 1) / float(j))
            term = float(f32(recall - old_recall)) * (float(f32(prev_precision + precision)) / 2.0)
            ap = f32(float(ap) + term)
            old_recall = recall
        j += 1
    return ap


def format_ap(ap) -> str:
    """``cout << ap`` for a float with the default stream precision (6 significant digits)."""
    return f"{float(ap):.6g}"


@dataclass
class OxfordScore:
    """``mAP`` (mean of the float32 per-query APs, in double) and ``per_query`` (query name -> AP as float)."""

    protocol: str
    mAP: float
    per_query: dict

    def format(self) -> str:
        lines = [f"{q} {format_ap(ap)}" for q, ap in self.per_query.items()]
        lines.append(f"mAP: {self.mAP:.6f}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"protocol": self.protocol, "mAP": self.mAP, "per_query": dict(self.per_query)}


def score_oxford(rankings: dict, gt: dict, *, database=None, protocol: str = "oxford5k") -> OxfordScore:
    """Score ``{query_name: [image names best first]}`` against :func:`load_oxford_gt`'s ground truth.

    Every query of ``gt`` needs a list (``ValueError`` naming the missing ones); a name listed twice is an error;
    with ``database`` (a set of names) an unknown name is an error.
    """
    known = None if database is None else {normalize_name(n) for n in database}
    missing = [q for q in gt if q not in rankings]
    if missing:
        raise ValueError(f"no ranked list for {len(missing)} of {len(gt)} queries: {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}.")
    per_query = {}
    for q, gq in gt.items():
        ranked = [normalize_name(n) for n in rankings[q]]
        check_ranked_list(ranked, known=known, where=f"results of query {q}")
        per_query[q] = float(compute_ap(gq.positives, gq.junk, ranked))
    unknown = [q for q in rankings if q not in gt]
    if unknown:
        raise ValueError(f"ranked lists for unknown queries: {', '.join(sorted(unknown)[:5])}.")
    m = float(np.mean(list(per_query.values())))
    return OxfordScore(protocol=protocol, mAP=m, per_query=per_query)


def read_results_folder(folder, gt: dict) -> dict:
    """Read ``<query>.txt`` files (one name per line, best first) for every query of ``gt``.

    ``ValueError`` naming the missing files when a query has no file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"results folder {folder} not found (expected one '<query>.txt' per query).")
    out, missing = {}, []
    for q in gt:
        f = folder / f"{q}.txt"
        if not f.is_file():
            missing.append(f.name)
            continue
        out[q] = [line.strip() for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    if missing:
        raise ValueError(f"{folder}: missing results files for {len(missing)} queries: {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}.")
    return out


def write_results_folder(folder, rankings: dict) -> None:
    """Write ``{query: [names]}`` as ``<query>.txt`` files (one name per line), each atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for q, names in rankings.items():
        with atomic_write(folder / f"{q}.txt", "w") as fh:
            fh.write("".join(f"{normalize_name(n)}\n" for n in names))
