"""Photo-group benchmarks in the ``minibench.json`` format, scored with the INRIA Holidays protocol.

Spec format (JSON, paths relative to the spec file's folder)::

    {"groups": [{"name": "g0", "images": ["a.jpg", "b.jpg", ...]}, ...],   # first image = query, rest = positives
     "distractors": ["x.jpg", ...],                                       # optional
     "images": {"a.jpg": {"width": .., "height": .., "md5": ".."}, ...}}   # optional metadata, md5 checked on request

The database is every image (group members and distractors). A query's ranked list may contain the query itself:
it is ignored and the ranks after it move up by one, exactly as ``holidays_map.py`` does; AP is the trapezoidal AP
of :mod:`retrieval.evaluation.ap` and the score is the mean over the queries (Jegou et al. 2012, Sec. 5, Holidays mAP).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from retrieval.evaluation.ap import ap_from_ranks, check_ranked_list


@dataclass
class GroupsBenchmark:
    """A loaded photo-group benchmark.

    Attributes
    ----------
    root : Path
        Folder the image names are relative to.
    images : list of str
        Every database image name (relative, POSIX separators), group members first then distractors.
    queries : list of str
        The first image of each group, in group order.
    positives : dict str -> set of str
        For each query, the other images of its group.
    group_of : dict str -> str
        Group name of each query.
    metadata : dict str -> dict
        The spec's ``images`` entries (may be empty).
    """

    root: Path
    images: list
    queries: list
    positives: dict
    group_of: dict
    metadata: dict = field(default_factory=dict)

    def path(self, name: str) -> Path:
        """Absolute path of a database image name."""
        return self.root / name

    def name_of(self, path) -> str:
        """Database name of ``path`` (a name, or a path inside ``root``); ``ValueError`` if it is not in the database."""
        s = str(path)
        if s in self._known:
            return s
        p = Path(s)
        if p.is_absolute():
            try:
                rel = Path(os.path.relpath(p, self.root)).as_posix()
            except ValueError:
                rel = s
            if rel in self._known:
                return rel
        raise ValueError(f"unknown image {s!r}: not in the benchmark (root {self.root}).")

    @property
    def _known(self) -> set:
        k = self.__dict__.get("_known_cache")
        if k is None:
            k = set(self.images)
            self.__dict__["_known_cache"] = k
        return k

    def missing_files(self, *, check_md5: bool = False) -> list:
        """Names whose file is absent (or, with ``check_md5``, whose md5 differs from the spec); [] when complete."""
        bad = []
        for name in self.images:
            p = self.path(name)
            if not p.is_file():
                bad.append(f"{name}: missing ({p})")
            elif check_md5 and "md5" in self.metadata.get(name, {}):
                h = hashlib.md5(p.read_bytes()).hexdigest()
                if h != self.metadata[name]["md5"]:
                    bad.append(f"{name}: md5 {h} != expected {self.metadata[name]['md5']}")
        return bad


def load_groups_spec(path) -> GroupsBenchmark:
    """Read a minibench-format JSON spec; ``ValueError`` naming the file and the problem when malformed."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}).") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("groups"), list) or not spec["groups"]:
        raise ValueError(f"{path}: expected a JSON object with a non-empty 'groups' list.")
    images, queries, positives, group_of = [], [], {}, {}
    seen = set()

    def add(name, where):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{path}: {where}: expected an image path string; got {name!r}.")
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"{path}: {where}: image path {name!r} must be relative to the spec's folder.")
        if name in seen:
            raise ValueError(f"{path}: {where}: image {name!r} is listed twice.")
        seen.add(name)
        images.append(name)

    for gi, group in enumerate(spec["groups"]):
        if not isinstance(group, dict) or not isinstance(group.get("images"), list) or len(group["images"]) < 2:
            raise ValueError(f"{path}: groups[{gi}] must be an object with an 'images' list of >= 2 paths "
                             "(query first, then its positives).")
        gname = str(group.get("name", f"group{gi}"))
        for name in group["images"]:
            add(name, f"groups[{gi}] ({gname})")
        q = group["images"][0]
        queries.append(q)
        positives[q] = set(group["images"][1:])
        group_of[q] = gname
    for name in spec.get("distractors", []) or []:
        add(name, "distractors")
    return GroupsBenchmark(root=path.resolve().parent, images=images, queries=queries, positives=positives,
                           group_of=group_of, metadata=dict(spec.get("images", {}) or {}))


@dataclass
class GroupsScore:
    """mAP and per-query AP of a groups benchmark (``per_query`` maps query name -> AP)."""

    mAP: float
    per_query: dict

    def to_json(self) -> dict:
        return {"protocol": "groups", "mAP": self.mAP, "per_query": dict(self.per_query)}


def score_groups(bench: GroupsBenchmark, rankings: dict, distractors=()) -> GroupsScore:
    """Score one ranked list per query (Holidays rule: the query itself, if present, is skipped).

    Parameters
    ----------
    bench : GroupsBenchmark
    rankings : dict query -> sequence of str
        For each query (name or path), database images best first (names or paths inside ``bench.root``).
        Every query of the benchmark needs a list; each image may appear once; unknown images are errors.
    distractors : collection of str
        Names of extra database images (outside the benchmark, never positive) that may appear in the lists.

    Returns
    -------
    GroupsScore
    """
    lists = {}
    for q, ranked in rankings.items():
        qn = bench.name_of(q)
        if qn not in bench.positives:
            raise ValueError(f"{qn!r} is not a query of the benchmark (queries are the first image of each group).")
        names = [r if r in distractors else bench.name_of(r) for r in ranked]
        check_ranked_list(names, where=f"results of query {qn}")
        lists[qn] = names
    missing = [q for q in bench.queries if q not in lists]
    if missing:
        raise ValueError(f"no ranked list for {len(missing)} queries: {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}.")
    per_query = {}
    for q in bench.queries:
        pos = bench.positives[q]
        ranks, shift = [], 0
        for r, name in enumerate(lists[q]):
            if name == q:
                shift = -1
            elif name in pos:
                ranks.append(r + shift)
        per_query[q] = ap_from_ranks(ranks, len(pos))
    m = sum(per_query.values()) / len(per_query)
    return GroupsScore(mAP=m, per_query=per_query)
