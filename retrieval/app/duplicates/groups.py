"""The groups of ``retrieval duplicates``: exact groups first, then the RAW + JPEG pairs of one shot (``formats``)
between the keepers of exact groups, near groups between the keepers of those, scene groups between the keepers of
near groups; each with its suggested keeper (:mod:`retrieval.app.photo_facts`).

**formats**: a camera writes a RAW file and a JPEG of the same shot side by side (``IMG_0001.CR2`` and
``IMG_0001.JPG``): the same photograph in two formats, which a photographer keeps together. A verified pair (near or
scene) of a camera RAW file and a file of another format in the same folder with the same name but for the
extension (any case) is reported as such (:func:`two_formats`); its group's keeper is the RAW (the ``raw`` criterion
of the keeper rule), and an action acts on it only when the group is named (like a scene group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from retrieval.app.duplicates.same_photo import NearEvidence
from retrieval.app.photo_facts import KEEPER_RULE, RAW_EXTENSIONS, choose_keeper, keeper_reason, photo_facts

KINDS = ("exact", "formats", "near", "scene")
KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


def two_formats(path_a: str, path_b: str) -> bool:
    """Whether two files are the RAW and the other format (JPEG, HEIC, TIFF, ...) of one shot as a camera writes
    them: one a camera RAW file (:data:`retrieval.app.photo_facts.RAW_EXTENSIONS`), the other not, in the same
    folder, with the same name but for the extension (case-insensitive)."""
    (stem_a, ext_a), (stem_b, ext_b) = (os.path.splitext(os.path.abspath(p)) for p in (path_a, path_b))
    raw_a, raw_b = ext_a.lower() in RAW_EXTENSIONS, ext_b.lower() in RAW_EXTENSIONS
    return raw_a != raw_b and os.path.normcase(stem_a).lower() == os.path.normcase(stem_b).lower()


@dataclass
class DuplicatePair:
    """Two photos (ids ``a`` and ``b``, ``a`` the one verified as the query: the first in
    :func:`content order <retrieval.app.duplicates.finder.content_order>`, or a new photo ``a = -1``) and why they
    are reported: ``kind``, the global ``similarity`` of the candidate, the verified ``inliers``, the quarter
    ``turn`` of ``a`` that matched, the same-photograph ``evidence``, and the matched ``regions`` (bounding boxes of
    the inliers in each photo)."""

    a: int
    b: int
    kind: str
    similarity: float | None = None
    inliers: int | None = None
    turn: int = 0
    evidence: NearEvidence | None = None
    regions: tuple | None = None

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "kind": self.kind,
                "similarity": None if self.similarity is None else round(float(self.similarity), 6),
                "inliers": self.inliers, "turn": 90 * self.turn,
                "evidence": None if self.evidence is None else self.evidence.to_json(),
                "regions": None if self.regions is None else [[round(float(v), 1) for v in r] for r in self.regions]}


@dataclass
class DuplicateGroup:
    """Photos of one kind joined by reported pairs, with the suggested ``keeper`` (an id) and why. Each image has
    ``keeper`` and ``hard_link``: in an exact group, the keeper's own file under another name (a hard link, as
    ``--action link`` makes them), which takes no space of its own: not an extra copy."""

    group: int
    kind: str
    images: list[dict]
    keeper: int
    keeper_reason: str
    pairs: list[DuplicatePair] = field(default_factory=list)

    @property
    def keeper_path(self) -> str:
        return next(im["path"] for im in self.images if im["id"] == self.keeper)

    def to_json(self) -> dict:
        return {"group": self.group, "kind": self.kind, "keeper": self.keeper, "keeper_path": self.keeper_path,
                "keeper_reason": self.keeper_reason, "images": self.images,
                "pairs": [p.to_json() for p in self.pairs]}


def _file_id(path: str) -> tuple | None:
    """``(device, inode)`` of a file (None when it cannot be read): equal for two hard links of one file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Components:
    """Connected components of pairs (union-find: the smaller id stands for its component)."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list]:
        out: dict = {}
        for x in list(self.parent):
            out.setdefault(self.find(x), []).append(x)
        return [sorted(v) for v in out.values() if len(v) > 1]


def build_groups(pairs: list[DuplicatePair], by_id: dict, keeper_rule=KEEPER_RULE) -> list[DuplicateGroup]:
    """Exact groups, the groups of a shot in two formats over the exact groups' keepers, near groups over their
    keepers, scene groups over the near groups' keepers (module docstring), numbered in that order (in each kind the
    largest first, then by path), each group's photos by path: numbers and order depend on the photos' paths, not
    on their catalog ids. A near or scene pair of :func:`two_formats` is a ``formats`` pair there (``pairs`` are not
    changed)."""
    pairs = [replace(p, kind="formats") if p.kind in ("near", "scene") and p.a in by_id and p.b in by_id
             and two_formats(by_id[p.a]["path"], by_id[p.b]["path"]) else p for p in pairs]
    facts: dict = {}

    def image(i):
        if i not in facts:
            r = by_id[i]
            f = photo_facts(r["path"])
            facts[i] = {"id": i, "path": r["path"], "size": r.get("size"), "width": f["width"],
                        "height": f["height"], "format": f["format"], "date": f["date"] or None,
                        "camera": f["camera"], "mtime": f["mtime"], "bytes": f["bytes"], "error": f["error"]}
        return facts[i]

    out: list[DuplicateGroup] = []
    top = {i: i for i in by_id}          # the keeper standing for a photo in the next kind's groups
    for kind in KINDS:
        comp = Components()
        mine = []
        for p in pairs:
            if p.kind != kind:
                continue
            a, b = top[p.a], top[p.b]
            if a != b:
                comp.join(a, b)
                mine.append(p)
        for members in comp.groups():
            members = sorted(members, key=lambda i: (by_id[i]["path"], i))
            images = [dict(image(i)) for i in members]
            fl = [{**im, "bytes": im["bytes"]} for im in images]
            k = choose_keeper(fl, keeper_rule)
            keeper = members[k]
            kept_file = _file_id(images[k]["path"]) if kind == "exact" else None
            for im in images:
                im["keeper"] = im["id"] == keeper
                im["hard_link"] = not im["keeper"] and kept_file is not None and _file_id(im["path"]) == kept_file
            member_set = set(members)
            ps = sorted((p for p in mine if top[p.a] in member_set), key=lambda p: (by_id[p.a]["path"], by_id[p.b]["path"]))
            out.append(DuplicateGroup(0, kind, images, keeper, keeper_reason(fl, k, keeper_rule), ps))
            for i, t in list(top.items()):
                if t in member_set:
                    top[i] = keeper
    out.sort(key=lambda g: (KIND_ORDER[g.kind], -len(g.images), g.images[0]["path"], g.images[0]["id"]))
    for n, g in enumerate(out, 1):
        g.group = n
    return out


