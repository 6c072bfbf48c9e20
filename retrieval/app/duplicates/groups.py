"""The groups of ``retrieval duplicates``: exact groups first, near groups between the keepers of exact groups,
scene groups between the keepers of near groups; each with its suggested keeper (:mod:`retrieval.app.photo_facts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.app.duplicates.same_photo import NearEvidence
from retrieval.app.photo_facts import KEEPER_RULE, choose_keeper, keeper_reason, photo_facts

KINDS = ("exact", "near", "scene")
KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


@dataclass
class DuplicatePair:
    """Two photos (ids ``a < b``, or a new photo ``a = -1``) and why they are reported: ``kind``, the global
    ``similarity`` of the candidate, the verified ``inliers``, the quarter ``turn`` of ``a`` that matched, the
    same-photograph ``evidence``, and the matched ``regions`` (bounding boxes of the inliers in each photo)."""

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
    """Photos of one kind joined by reported pairs, with the suggested ``keeper`` (an id) and why."""

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
    """Exact groups, near groups over the exact groups' keepers, scene groups over the near groups' keepers
    (module docstring, step 4), numbered in that order."""
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
            images = [dict(image(i)) for i in members]
            fl = [{**im, "bytes": im["bytes"]} for im in images]
            k = choose_keeper(fl, keeper_rule)
            keeper = members[k]
            for im in images:
                im["keeper"] = im["id"] == keeper
            member_set = set(members)
            ps = sorted((p for p in mine if top[p.a] in member_set), key=lambda p: (p.a, p.b))
            out.append(DuplicateGroup(0, kind, images, keeper, keeper_reason(fl, k, keeper_rule), ps))
            for i, t in list(top.items()):
                if t in member_set:
                    top[i] = keeper
    out.sort(key=lambda g: (KIND_ORDER[g.kind], -len(g.images), g.images[0]["id"]))
    for n, g in enumerate(out, 1):
        g.group = n
    return out


