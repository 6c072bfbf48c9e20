"""Safe, undoable actions on the duplicate groups of an index (``retrieval duplicates --action``).

1. :func:`plan_actions` turns the groups of :mod:`retrieval.app.duplicates` into a plan: one step per file that is
   not its group's keeper, with the file's size and content hash (:func:`retrieval.features.store.file_hash`)
   read now. Nothing is touched; :func:`dry_run_text` shows it.
2. :func:`apply_plan` carries it out. The plan file is written (atomically) before any file is touched and again
   around every step, so it always says what was done: an interrupted run can be undone. A step whose file (or
   keeper) no longer has the planned content is left alone (status ``changed``); no file is ever overwritten
   (:func:`retrieval.app.safe_files.move_file`). Actions: ``move`` (to a folder, keeping the folder structure),
   ``trash`` (the freedesktop.org trash, which desktop file managers restore from:
   :func:`retrieval.app.safe_files.trash_entry`), ``link`` (an exact copy becomes a hard link to its keeper, a
   symbolic link when a hard link is impossible). Moved and trashed files then leave the index and their new
   places inside a folder the index follows are kept out of its syncs, in ONE commit (:meth:`Writer.remove
   <retrieval.app.index_build.Writer.remove>`); when the index refuses it (a full disk, a read-only index), every
   file is put back and the error raised: the plan changed nothing. A link keeps the bytes of its path: the index is
   not changed.
3. :func:`~retrieval.app.duplicates.undo.undo_plan` reverses the steps done (or started), newest first, and gives the files back to the index in
   one commit; when the index refuses it, the files go back where the plan had put them (the undo can be run
   again).

Plan file (format ``retrieval-duplicates-plan``, version 1): a JSON object with ``action``, ``created``,
``index``, ``to``, ``kinds``, ``groups_named``, ``steps`` (each ``group``, ``kind``, ``path``, ``keeper``,
``keeper_sha``, ``size``, ``sha``, ``dest`` for a move, ``freed`` (bytes of disk space the step frees, read
before it: :func:`~retrieval.app.duplicates.space.frees`), ``status``: planned, started, done, changed, missing,
exists or failed, with a ``reason`` when not done; trash steps record ``trash_file`` and ``trash_info``, link steps
``link``: hard or symbolic, and the file's ``mode`` and ``mtime_ns``; after an undo, ``undo``: done, exists,
missing, changed, not-done or failed, with an ``undo_reason``), ``skipped`` (files the plan leaves out, with a
``reason``), then ``applied``, ``removed`` and ``excluded`` (the index's changes), ``index_updated`` and
``undone`` as they happen (``index_failed``: the index refused the change and the files were put back).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from retrieval.app.duplicates.plan_file import (
    ACTIONS,
    PLAN_FORMAT,
    PLAN_VERSION,
    check_plan,
    inside_any,
    now_text,
    record_quietly,
    trash_step,
)
from retrieval.app.duplicates.space import freed_text, frees
from retrieval.app.duplicates.undo import undo_step
from retrieval.app.safe_files import move_file
from retrieval.core.checks import ParamError
from retrieval.core.persistence import fsync_dir, write_json_atomic
from retrieval.features.store import file_hash

KINDS = ("exact", "formats", "near", "scene")
LINK_ONLY_EXACT = ("{action} link replaces a file by a hard link to its keeper: only for exact copies "
                   "({kinds} exact).")
SCENE_NEEDS_GROUPS = ("scene groups are photos of the same scene, not copies: they are acted on only when named "
                      "({groups} with their numbers).")
FORMATS_NEED_GROUPS = ("formats groups are the RAW and the JPEG of one shot, the same photograph in two formats "
                       "kept together, not copies: they are acted on only when named ({groups} with their numbers).")
LINKED = "already a link to its keeper (the same file: it takes no space of its own)"
"""Why a plan leaves out a file that is its keeper's file under another name (a hard link, or a symbolic link)."""
_WHAT = {"exact": "exact copy of", "formats": "other format of", "near": "near duplicate of",
         "scene": "same scene as"}
_NO_HARD_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def _abs(path) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


# ---------------------------------------------------------------------------------------------------- plan
def plan_actions(groups, action: str, *, kinds=("exact", "near"), to=None, groups_named=None, index_path=None,
                 roots=None) -> dict:
    """The plan of ``action`` on duplicate groups (module docstring); reads the files, changes nothing.

    Parameters
    ----------
    groups : list of dict — ``{"group", "kind", "keeper", "images": [{"id", "path", ...}, ...]}`` (the keeper
        defaults to the first image)
    action : {"move", "trash", "link"}
    kinds : kinds of groups acted on (``exact``, ``formats``, ``near``, ``scene``); ``link`` takes only ``exact``
    to : folder the files are moved to (``move`` only): ``to/<path relative to its index root>``, or
        ``to/<absolute path without its leading slash>`` for a file under no root (or whose relative place is
        taken by another file of the plan)
    groups_named : group numbers the user named, or None; when given only those groups are acted on, and a
        ``scene`` or ``formats`` group (a RAW and the JPEG of the same shot) never is unless named

    A file that is its keeper's file under another name (a hard link, as ``link`` makes them, or a symbolic link)
    is never acted on: removing it frees nothing (``skipped``, :data:`LINKED`).
    index_path : the index folder, stored in the plan (None: filled by :func:`apply_plan`)
    roots : folders the index follows (:attr:`Index.roots <retrieval.app.index.Index.roots>`), for ``dest``

    Raises
    ------
    ValueError (one line) for an unknown action or kind, ``move`` without ``to``, ``link`` with other kinds
    than ``exact``, or ``scene`` or ``formats`` in ``kinds`` without ``groups_named``.
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}.")
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown kind(s) {', '.join(map(repr, unknown)) or 'none given'}; kinds are "
                         f"{', '.join(KINDS)}.")
    if "scene" in kinds and not groups_named:
        raise ParamError("groups", None, template=SCENE_NEEDS_GROUPS)
    if "formats" in kinds and not groups_named:
        raise ParamError("groups", None, template=FORMATS_NEED_GROUPS)
    if action == "link" and set(kinds) != {"exact"}:
        raise ParamError("action", action, template=LINK_ONLY_EXACT)
    if action == "move" and not to:
        raise ParamError("to", to, template="{action} move needs {to} DIR (the folder the duplicates are moved to).")
    named = None if groups_named is None else {int(g) for g in groups_named}
    to = _abs(to) if action == "move" else None
    roots = [_abs(r) for r in roots or ()]
    groups = [g for g in groups if g["kind"] in kinds and (named is None or int(g["group"]) in named)]
    keepers = {_abs(g.get("keeper") or g["images"][0]["path"]) for g in groups}
    steps, skipped, seen, dests = [], [], set(), set()
    for g in groups:
        keeper = _abs(g.get("keeper") or g["images"][0]["path"])
        keeper_sha = None
        for im in g["images"]:
            path = _abs(im["path"])
            if path in keepers or path in seen:
                continue
            seen.add(path)
            base = {"group": int(g["group"]), "kind": g["kind"], "path": path, "keeper": keeper}
            try:
                if os.path.samefile(path, keeper):
                    skipped.append({**base, "reason": LINKED})
                    continue
                size, sha = os.stat(path).st_size, file_hash(path)
                keeper_sha = keeper_sha or file_hash(keeper)
            except OSError as exc:
                skipped.append({**base, "reason": f"cannot read {exc.filename}: {exc.strerror}"})
                continue
            if action == "link" and sha != keeper_sha:
                skipped.append({**base, "reason": "same pixels as its keeper but other bytes (metadata): a link "
                                                  "would change this file's content"})
                continue
            step = {**base, "keeper_sha": keeper_sha, "size": size, "sha": sha, "status": "planned"}
            if action == "move":
                step["dest"] = _dest(path, to, roots, dests)
                if step["dest"] == path:
                    skipped.append({**base, "reason": f"already in {to}"})
                    continue
            steps.append(step)
    return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "action": action, "created": now_text(),
            "index": None if index_path is None else str(Path(index_path).resolve()), "to": to,
            "kinds": list(kinds), "groups_named": None if named is None else sorted(named),
            "steps": steps, "skipped": skipped}


def _dest(path: str, to: str, roots: list[str], used: set) -> str:
    """Where a move puts ``path`` (:func:`plan_actions`, ``to``); each destination is used once."""
    under = [r for r in roots if path.startswith(r.rstrip("/") + "/")]
    dest = os.path.join(to, os.path.relpath(path, min(under, key=len)) if under else path.lstrip("/"))
    if dest in used:
        dest = os.path.join(to, path.lstrip("/"))
    used.add(dest)
    return dest


def _size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def dry_run_text(plan: dict) -> list[str]:
    """One line per step (``move  /a/b.jpg -> DIR/b.jpg  (exact copy of /a/keep.jpg, 2.1 MB)``), then one per
    file the plan skips (``skip  /a/c.jpg  (reason)``)."""
    action, lines = plan["action"], []
    for s in plan["steps"]:
        target = f" -> {s['dest']}" if action == "move" else f" -> {s['keeper']}" if action == "link" else ""
        lines.append(f"{action:<5} {s['path']}{target}  ({_WHAT.get(s['kind'], s['kind'])} {s['keeper']}, "
                     f"{_size_text(int(s['size']))})")
    lines += [f"skip  {s['path']}  ({s['reason']})" for s in plan.get("skipped", [])]
    return lines


# ---------------------------------------------------------------------------------------------------- files
def _link(step: dict, record) -> str:
    """Replace ``step["path"]`` by a link to its keeper, made at a temporary name then renamed over it; the status."""
    path, keeper = step["path"], step["keeper"]
    st = os.stat(path)
    step.update(mode=stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns,
                tmp=os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.link.tmp"))
    record()
    if os.path.lexists(step["tmp"]):
        os.unlink(step["tmp"])
    try:
        os.link(keeper, step["tmp"])
        step["link"] = "hard"
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINK:
            raise
        os.symlink(keeper, step["tmp"])
        step["link"] = "symbolic"
    if file_hash(path) != step["sha"] or file_hash(step["tmp"]) != step["sha"]:   # the last check before replacing
        os.unlink(step["tmp"])
        step["reason"] = "changed since the plan: left as it is"
        return "changed"
    os.replace(step["tmp"], path)
    fsync_dir(os.path.dirname(path))
    return "done"


# ---------------------------------------------------------------------------------------------------- apply
def _check(step: dict, keeper_shas: dict) -> tuple[str, str] | None:
    """(status, reason) when the step must be left alone (its file or its keeper changed since the plan), else
    None; ``keeper_shas`` caches the keepers' hashes of this run."""
    if not os.path.isfile(step["path"]):
        return "missing", "the file is gone"
    if file_hash(step["path"]) != step["sha"]:
        return "changed", "changed since the plan: left as it is"
    keeper = step["keeper"]
    if keeper not in keeper_shas:
        keeper_shas[keeper] = file_hash(keeper) if os.path.isfile(keeper) else None
    if keeper_shas[keeper] != step["keeper_sha"]:
        return "changed", f"its keeper {keeper} changed or is gone since the plan: left as it is"
    return None


def apply_plan(idx, plan: dict, *, plan_path) -> dict:
    """Carry out ``plan`` (module docstring) on the files and the index ``idx``, recording it in ``plan_path``.

    Returns ``{"done", "skipped", "failed", "bytes_freed", "bytes_not_freed", "freed", "plan"}``: steps done, steps
    left alone (``changed``, ``missing``, ``exists``) plus the files the plan skipped, steps that failed, the disk
    space freed (:func:`~retrieval.app.duplicates.space.frees`: a move to another disk, a link replacing a copy; a move on the same disk or to the
    trash frees nothing), the bytes of the files moved or trashed that still take room on their disk, the two in
    words (:func:`~retrieval.app.duplicates.space.freed_text`), the plan file. ValueError (one line) for a plan applied already or made for another
    index.
    """
    check_plan(plan, plan_path)
    if plan.get("applied"):
        raise ValueError(f"{plan_path}: this plan was applied on {plan['applied']}; undo it or make a new plan.")
    here = str(Path(idx.path).resolve())
    if plan.get("index") and plan["index"] != here:
        raise ValueError(f"{plan_path}: the plan was made for the index {plan['index']}, not {here}.")
    plan.update(index=here, applied=now_text())

    def record():
        write_json_atomic(plan_path, plan)

    record()   # before any file is touched
    action, keeper_shas = plan["action"], {}
    for step in plan["steps"]:
        if step["status"] != "planned":
            continue
        try:
            left = _check(step, keeper_shas)
            if left is not None:
                step["status"], step["reason"] = left
                continue
            step["freed"] = frees(action, step)
            step["status"] = "started"
            if action == "move":
                record()
                move_file(step["path"], step["dest"], step["sha"])
            elif action == "trash":
                trash_step(step, record)
            else:
                step["status"] = _link(step, record)
                continue
            step["status"] = "done"
        except FileExistsError as exc:
            step["status"], step["reason"] = "exists", f"{exc.filename} exists: not overwritten"
        except OSError as exc:
            step["status"], step["reason"] = "failed", f"{exc.filename or step['path']}: {exc.strerror or exc}"
        finally:
            record()
    if action != "link":
        try:
            _leave_index(idx, plan)
        except BaseException as exc:   # the index unchanged: the files go back, nothing is left half done
            _put_back(plan, exc, plan_path)
            raise
    plan["index_updated"] = now_text()
    record()
    counts = {s: sum(st["status"] == s for st in plan["steps"]) for s in ("done", "failed")}
    done = [s for s in plan["steps"] if s["status"] == "done"]
    freed = sum(int(s.get("freed", 0)) for s in done)
    held = 0 if action == "link" else sum(int(s["size"]) for s in done) - freed
    return {"done": counts["done"], "skipped": len(plan["steps"]) - counts["done"] - counts["failed"]
            + len(plan.get("skipped", [])), "failed": counts["failed"], "bytes_freed": freed,
            "bytes_not_freed": held, "freed": freed_text(action, freed, held, plan.get("to")), "plan": str(plan_path)}


def _leave_index(idx, plan: dict) -> None:
    """Moved and trashed files leave the index (and its later syncs), and their new places in followed folders are
    kept out of it: ONE commit (:meth:`Writer.remove <retrieval.app.index_build.Writer.remove>`), made or not."""
    done = [s for s in plan["steps"] if s["status"] == "done"]
    indexed = [s["path"] for s in done if idx.catalog.row_by_path(s["path"]) is not None]
    roots = idx.roots
    places = [s.get("dest") or s.get("trash_file") for s in done]
    inside = [p for p in places if p and inside_any(p, roots)]
    if indexed:
        idx.writer().remove(indexed, exclude=inside)
    elif inside:
        idx.writer().exclude(inside)
    plan["removed"] = indexed
    plan["excluded"] = inside


def _put_back(plan: dict, exc: BaseException, plan_path) -> None:
    """The index refused the change of an applied plan (``exc``): every step done or started is reversed (the files
    back at their places, newest first), so that the plan changed nothing; the plan records it (``undo`` of each
    step, ``index_failed``, and ``undone`` when every file is back: an undo then has nothing left to do)."""

    reason = f"the index could not be updated ({exc}): put back"
    back = True
    for step in reversed(plan["steps"]):
        if step["status"] not in ("done", "started"):
            continue
        try:
            step["undo"], why = undo_step(plan["action"], step, plan.get("to"))
        except OSError as err:
            step["undo"], why = "failed", f"{err.filename or step['path']}: {err.strerror or err}"
        step["undo_reason"] = why or reason
        back = back and step["undo"] in ("done", "not-done")
        record_quietly(plan_path, plan)
    plan["index_failed"] = str(exc)
    if back:
        plan["undone"] = now_text()
    record_quietly(plan_path, plan)


# ---------------------------------------------------------------------------------------------------- undo
