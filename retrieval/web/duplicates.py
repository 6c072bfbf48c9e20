"""The duplicates of the served index (the routes of :mod:`retrieval.web.duplicates_api` call this).

- **Groups** (:func:`retrieval.app.duplicates.find_duplicates`) cost seconds to minutes on a large collection: they
  are computed once per generation of the index and kept in :class:`ServedDuplicates` (the generation of the
  searcher they were found on, and the groups). One computation runs at a time, under a lock: a second request
  waits for the first and reads its result; nothing shared is assigned outside that lock. A result is kept only
  when the generation did not change while it was computed (otherwise the next request computes it again). The
  finder decodes pixels only to compare two photos of a near pair with identical features: that computation holds
  a reservation of the decode budget (:mod:`retrieval.web.budget`) for the largest photos it may decode at once.
- **Actions** (:mod:`retrieval.app.duplicates.actions`): a dry run (the plan, nothing touched) or the plan carried
  out, on the groups of the current generation; the plan file goes to ``INDEX/duplicate-plans/`` and its bare
  name is what the undo takes back (never a path: :func:`plan_file`). Carrying out and undoing are writes: they run
  in the server's writer thread, the index's writer lock held by each change of the index as for the other writes.
- **Against**: which uploaded photos (checked like any upload, in temporary files) the index already has
  (:func:`retrieval.app.duplicates.find_against`); the uploads are never added, each is decoded within the budget.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from retrieval.web.uploads import ApiError

KINDS = ("exact", "formats", "near", "scene")
ACTED_KINDS = ("exact", "near")
"""The kinds an action takes by default (a scene or formats group is acted on only when named)."""
PLANS = "duplicate-plans"
"""The folder of the index that holds the plan files of the actions carried out."""
PLAN_NAME = re.compile(r"plan-[A-Za-z0-9_-]+\.json")
"""What the name of a plan file looks like (:func:`plan_file`)."""
FINDER_THREADS = 2
"""Candidate pairs verified side by side by one computation of the groups."""
PIXEL_BYTES = 8
"""Bytes per pixel of one photo decoded to compare pixels (the decoded image and its RGB copy)."""


def parse_kinds(text: str | None, default=KINDS) -> tuple:
    """Kinds from a comma list (``exact,near``); ApiError 400 for anything else."""
    if text is None or not text.strip():
        return tuple(default)
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ApiError(400, f"kinds={text!r}: expected a comma list of {', '.join(KINDS)}.")
    return kinds


def plan_file(index_path, name: str) -> Path:
    """The plan file called ``name`` in ``INDEX/duplicate-plans``: a bare file name of an existing plan (ApiError
    400 for a path, 404 for no such plan)."""
    if not isinstance(name, str) or "/" in name or "\\" in name or "\0" in name or not PLAN_NAME.fullmatch(name):
        raise ApiError(400, f"plan {str(name)[:80]!r}: expected the bare name of a plan file of "
                            f"{PLANS}/ (plan-....json), as an action returned it.")
    folder = Path(index_path) / PLANS
    path = folder / name
    if path.is_symlink() or not path.is_file() or path.resolve().parent != folder.resolve():
        raise ApiError(404, f"no plan {name!r} in {PLANS}/ of the index.")
    return path


def _new_plan_path(index_path, action: str) -> Path:
    folder = Path(index_path) / PLANS
    folder.mkdir(exist_ok=True)
    stem = f"plan-{time.strftime('%Y%m%d-%H%M%S')}-{action}"
    path, n = folder / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    return path


class ServedDuplicates:
    """The duplicates of one served index (module docstring); ``service``: the :class:`retrieval.web.service.Service`
    (its index, decode budget, searchability check and upload decoding)."""

    def __init__(self, service):
        self.service = service
        self._lock = threading.Lock()
        self._found: tuple[int, list] | None = None   # (generation, groups): read and assigned under _lock only

    # ------------------------------------------------------------------ groups
    def _largest_decode(self, idx) -> int:
        _, rows = idx.catalog.snapshot()
        pixels = max((int(r["width"] or 0) * int(r["height"] or 0) for r in rows if r["status"] == "indexed"),
                     default=0)
        return 2 * FINDER_THREADS * PIXEL_BYTES * pixels

    def groups(self) -> tuple[int, list]:
        """``(generation, groups)``: the :class:`~retrieval.app.duplicates.DuplicateGroup` list of the current
        generation, computed when it is not kept yet (module docstring)."""
        from retrieval.app.duplicates import find_duplicates

        svc = self.service
        idx = svc.local()
        svc.searchable(idx)
        with self._lock:
            gen = idx.searcher().generation
            if self._found is not None and self._found[0] == gen:
                return self._found
            budget = svc.budget
            need = min(self._largest_decode(idx), budget.per_request)
            try:
                with budget.reserve(need, "the pixel comparisons of the duplicates"):
                    found = find_duplicates(idx, threads=FINDER_THREADS)
            except ValueError as exc:   # e.g. the generic model the codes need is missing
                raise ApiError(409, str(exc).splitlines()[0] if str(exc) else "duplicates unavailable.") from None
            if idx.searcher().generation == gen:
                self._found = (gen, found)
            return gen, found

    def listing(self, kinds) -> dict:
        """``{generation, groups: [group.to_json()]}`` of the groups of ``kinds``."""
        gen, found = self.groups()
        return {"generation": gen, "groups": [g.to_json() for g in found if g.kind in kinds]}

    # ------------------------------------------------------------------ actions
    def plan(self, action: str, *, kinds=None, to: str | None = None, groups=None, generation: int | None = None,
             keepers: dict | None = None) -> tuple[int, dict]:
        """``(generation, plan)`` of ``action`` on the current groups (nothing is touched); ``keepers``: the
        keeper the user chose for some groups (``{group: image id}``); ApiError 400 for bad input, 409 when
        ``generation`` (the one the caller was shown) is no longer the index's."""
        from retrieval.app.duplicates.actions import plan_actions

        kinds = tuple(kinds) if kinds else (("exact",) if action == "link" else ACTED_KINDS)
        if action == "move":
            if not to or not str(to).strip():
                raise ApiError(400, "action move needs 'to': the folder the extra copies are moved to.")
            if not os.path.isabs(os.path.expanduser(str(to).strip())):
                raise ApiError(400, f"to={str(to)[:200]!r}: give an absolute folder (the server's working folder "
                                    f"is not yours).")
        if action == "link" and set(kinds) != {"exact"}:
            raise ApiError(400, "action link replaces a file by a link to its keeper: only for exact copies "
                                "(kinds [\"exact\"]).")
        if "scene" in kinds and not groups:
            raise ApiError(400, "scene groups are photos of the same scene, not copies: name them in 'groups' "
                                "(their numbers) to act on them.")
        if "formats" in kinds and not groups:
            raise ApiError(400, "formats groups are the RAW and the JPEG of one shot, the same photograph in two "
                                "formats kept together: name them in 'groups' (their numbers) to act on them.")
        gen, found = self.groups()
        if generation is not None and int(generation) != gen:
            raise ApiError(409, f"the index changed since the groups were shown (generation {generation}, now "
                                f"{gen}): look at the duplicates again.")
        docs = []
        chosen = {int(k): int(v) for k, v in (keepers or {}).items()}
        for g in found:
            d = g.to_json()
            d["keeper"] = g.keeper_path
            if g.group in chosen:
                by_id = {im["id"]: im for im in d["images"]}
                if chosen[g.group] not in by_id:
                    raise ApiError(400, f"keepers: image {chosen.pop(g.group)} is not in group {g.group}.")
                d["keeper"] = by_id[chosen.pop(g.group)]["path"]
            docs.append(d)
        if chosen:
            raise ApiError(400, f"keepers: no group {min(chosen)} in generation {gen}.")
        idx = self.service.local()
        try:
            plan = plan_actions(docs, action, kinds=kinds, to=str(to).strip() if to else None,
                                groups_named=groups or None, index_path=str(idx.path), roots=idx.roots)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return gen, plan

    def dry_run(self, action: str, **options) -> dict:
        from retrieval.app.duplicates.actions import dry_run_text

        gen, plan = self.plan(action, **options)
        return {"generation": gen, "confirmed": False, "action": action, "files": len(plan["steps"]),
                "bytes": sum(int(s["size"]) for s in plan["steps"]), "lines": dry_run_text(plan), "plan": plan}

    def apply(self, action: str, **options) -> dict:
        """Carry out the plan of ``action`` (in the writer thread): ``{generation, confirmed, action, files, lines,
        summary, plan (its file's name), steps: [{path, status, reason}]}``."""
        from retrieval.app.duplicates.actions import apply_plan, dry_run_text

        _, plan = self.plan(action, **options)
        idx = self.service.local()
        if plan["steps"] and action != "link" and idx.writer_active():
            raise ApiError(409, "another 'retrieval index' or 'remove' is writing to the index: nothing was done; "
                                "try again when it has finished.")
        path = _new_plan_path(idx.path, action)
        lines = dry_run_text(plan)
        try:
            summary = apply_plan(idx, plan, plan_path=str(path))
        except RuntimeError as exc:   # the writer lock taken by another process meanwhile
            raise ApiError(409, f"{exc} The files were handled as the plan {path.name} records, the index not "
                                f"updated: undo the plan, or run 'retrieval index' when the other writer has "
                                f"finished.") from None
        except ValueError as exc:
            raise ApiError(409, str(exc)) from None
        summary["plan"] = path.name
        return {"generation": idx.catalog.generation(), "confirmed": True, "action": action,
                "files": len(plan["steps"]), "lines": lines, "summary": summary, "plan": path.name,
                "steps": [{"path": s["path"], "status": s["status"], **({"reason": s["reason"]} if s.get("reason")
                                                                         else {})} for s in plan["steps"]]}

    def undo(self, name: str) -> dict:
        """Undo the plan file ``name`` of ``INDEX/duplicate-plans`` (in the writer thread)."""
        from retrieval.app.duplicates.undo import undo_plan

        idx = self.service.local()
        path = plan_file(idx.path, name)
        try:
            summary = undo_plan(idx, path)
        except RuntimeError as exc:
            raise ApiError(409, str(exc)) from None
        except ValueError as exc:
            raise ApiError(409, str(exc).replace(str(path), name)) from None
        summary["plan"] = name
        return {"generation": idx.catalog.generation(), "summary": summary, "plan": name}

    # ------------------------------------------------------------------ against
    def against(self, checked: list) -> dict:
        """``{results: [{path (the upload's name), kind, matches: [{id, path, kind}]}]}`` for checked uploads
        ``[(name, CheckedImage)]``; nothing is added to the index. They are read one after the other: the
        computation holds the decode budget for the largest of them."""
        from retrieval.app.duplicates import find_against

        svc = self.service
        idx = svc.local()
        svc.searchable(idx)
        if not checked:
            return {"results": []}
        name, largest = max(checked, key=lambda c: c[1].size[0] * c[1].size[1])
        try:
            with svc.decoding(largest.path, f"upload {name!r}"):
                found = find_against(idx, [str(c.path) for _, c in checked], threads=FINDER_THREADS)
        except ValueError as exc:   # e.g. the generic model the codes need is missing
            raise ApiError(409, str(exc).splitlines()[0] if str(exc) else "duplicates unavailable.") from None
        results = []
        for (name, c), f in zip(checked, found, strict=True):
            entry = {"path": name, "kind": f["kind"],
                     "matches": [{"id": m["id"], "path": m["path"], "kind": m["kind"]} for m in f["matches"]]}
            if f["error"]:
                entry["error"] = f["error"].replace(str(c.path), name)
            results.append(entry)
        return {"results": results}
