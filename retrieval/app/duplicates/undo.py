"""Undoing an applied duplicates plan (:func:`undo_plan`): each step put back in reverse order (a moved file moved
back, a trashed one restored, a link replaced by a copy of its keeper checked against the content it had), the
index told, and the plan marked undone; a failure puts back what was undone (:func:`_redo`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from retrieval.app.duplicates.plan_file import inside_any, load_plan, now_text, record_quietly, trash_step
from retrieval.app.safe_files import move_file
from retrieval.core.persistence import fsync_dir, write_json_atomic
from retrieval.features.store import file_hash

__all__ = ["undo_plan", "undo_step"]


def _prune(folder: str, top: str | None) -> None:
    """Remove the empty folders from ``folder`` up to (not including) ``top``."""
    while top and inside_any(folder, [top]):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def undo_step(action: str, step: dict, to: str | None) -> tuple[str, str | None]:
    """Reverse one step (done or started); (undo status, reason)."""
    path = step["path"]
    if action == "link":
        tmp = step.get("tmp")
        if tmp and os.path.lexists(tmp):
            os.unlink(tmp)   # a link made by an interrupted step, never renamed over the file
        if not os.path.lexists(path):
            return "missing", "the file is gone"
        keeper = step["keeper"]
        if not (os.path.islink(path) or (os.path.exists(keeper) and os.path.samefile(path, keeper))):
            return ("changed", "no longer a link to its keeper: left as it is") if step["status"] == "done" else (
                "not-done", "the step had not replaced the file")
        copy = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.copy.tmp")
        try:
            shutil.copyfile(path, copy)
            with open(copy, "rb+") as fh:
                os.fsync(fh.fileno())
            if file_hash(copy) != step["sha"]:
                return "changed", "its keeper changed since: the link is left"
            os.chmod(copy, step.get("mode", 0o644))
            if "mtime_ns" in step:
                os.utime(copy, ns=(step["mtime_ns"], step["mtime_ns"]))
            os.replace(copy, path)
        finally:
            if os.path.lexists(copy):
                os.unlink(copy)
        fsync_dir(os.path.dirname(path))
        return "done", None
    place = step.get("dest") if action == "move" else step.get("trash_file")
    if not place or not os.path.lexists(place):
        if action == "trash" and step.get("trash_info") and os.path.lexists(path):
            Path(step["trash_info"]).unlink(missing_ok=True)   # interrupted before the file was moved
        return ("missing", f"{place} is gone") if step["status"] == "done" else ("not-done", "never moved")
    if os.path.lexists(path):
        return "exists", f"{path} exists: not overwritten"
    move_file(place, path)
    if action == "trash":
        Path(step["trash_info"]).unlink(missing_ok=True)
    else:
        _prune(os.path.dirname(place), to)
    return "done", None


def _redo(plan: dict, undone: list, exc: BaseException, plan_path) -> None:
    """The index refused to take back the files an undo put back (``exc``): each goes back where the plan had put
    it (moved again, or to the trash again), so that the undo changed nothing and can be run again."""
    for step in undone:
        try:
            if plan["action"] == "trash":
                trash_step(step, lambda: record_quietly(plan_path, plan))
            else:
                move_file(step["path"], step["dest"], step["sha"])
            step.pop("undo", None)
            step["undo_reason"] = f"the index could not take the file back ({exc}): left where the plan had put it"
        except OSError as err:
            step["undo_reason"] = (f"the index could not take the file back ({exc}) and it could not be put where "
                                   f"the plan had put it ({err.filename or step['path']}: {err.strerror or err})")
        record_quietly(plan_path, plan)


def undo_plan(idx, plan_path) -> dict:
    """Reverse the steps of an applied plan (done, or started by an interrupted run), newest first: moved and
    trashed files go back (never over a file now at their place), links become independent copies of the keeper's
    bytes; then the index takes the files back (:meth:`Index.include <retrieval.app.index.Index.include>`, their
    moved places no longer excluded, :meth:`Index.add <retrieval.app.index.Index.add>`).

    Returns ``{"restored", "skipped", "failed", "plan"}``. ValueError (one line) for a file that is not a plan, or
    a plan undone already.
    """
    plan = load_plan(plan_path)
    if plan.get("undone"):
        raise ValueError(f"{plan_path}: this plan was undone on {plan['undone']}.")
    action, restored = plan["action"], []
    for step in reversed(plan["steps"]):
        if step["status"] not in ("done", "started"):
            continue
        try:
            step["undo"], reason = undo_step(action, step, plan.get("to"))
        except OSError as exc:
            step["undo"], reason = "failed", f"{exc.filename or step['path']}: {exc.strerror or exc}"
        if reason:
            step["undo_reason"] = reason
        if step["undo"] == "done":
            restored.append(step["path"])
        write_json_atomic(plan_path, plan)
    if action != "link":
        undone = [s for s in plan["steps"] if s.get("undo") == "done"]
        back = [s["path"] for s in undone]
        places = {s.get("dest") or s.get("trash_file") for s in undone}
        include = back + [p for p in plan.get("excluded") or [] if p in places]
        removed = set(plan.get("removed") or [])
        again = [p for p in back if p in removed]
        try:   # ONE commit: the files indexed again and no longer excluded, or nothing
            if again:
                idx.writer().add(again, include=include)
            elif include:
                idx.writer().include(include)
        except BaseException as exc:   # the index unchanged: the files go back where the plan had put them
            _redo(plan, undone, exc, plan_path)
            raise
    plan["undone"] = now_text()
    write_json_atomic(plan_path, plan)
    undo = [s.get("undo") for s in plan["steps"] if s["status"] in ("done", "started")]
    return {"restored": len(restored), "failed": undo.count("failed"),
            "skipped": len(undo) - len(restored) - undo.count("failed"), "plan": str(plan_path)}
