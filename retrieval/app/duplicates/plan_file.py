"""The plan file of a duplicates action and the steps both applying and undoing it take: its format
(:data:`PLAN_FORMAT`, :func:`load_plan`), its quiet writes on an error path, moving a file to the trash."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from retrieval.app.safe_files import move_file, trash_entry
from retrieval.core.persistence import write_json_atomic

__all__ = ["ACTIONS", "PLAN_FORMAT", "PLAN_VERSION", "check_plan", "inside_any", "load_plan", "now_text", "record_quietly",
           "trash_step"]

PLAN_FORMAT = "retrieval-duplicates-plan"
PLAN_VERSION = 1
ACTIONS = ("move", "trash", "link")


def now_text() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def load_plan(plan_path) -> dict:
    """The plan stored in ``plan_path``; ValueError (one line naming the file) when it is not one."""
    try:
        plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{plan_path}: cannot read the plan file ({exc.strerror}).") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{plan_path}: not a duplicates plan file (not JSON).") from None
    check_plan(plan, plan_path)
    return plan


def check_plan(plan, plan_path) -> None:
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise ValueError(f"{plan_path}: not a duplicates plan file (format {PLAN_FORMAT!r} expected).")
    if plan.get("version") != PLAN_VERSION:
        raise ValueError(f"{plan_path}: duplicates plan version {plan.get('version')!r}; this library reads "
                         f"version {PLAN_VERSION}.")
    if plan.get("action") not in ACTIONS or not isinstance(plan.get("steps"), list):
        raise ValueError(f"{plan_path}: damaged duplicates plan file (action or steps missing).")


def trash_step(step: dict, record) -> None:
    """Move ``step["path"]`` to the trash: its ``.trashinfo`` first (:func:`trash_entry`), recorded in the plan,
    then the file."""
    step["trash_file"], step["trash_info"] = trash_entry(step["path"])
    record()
    try:
        move_file(step["path"], step["trash_file"], step["sha"])
    except BaseException:
        os.unlink(step["trash_info"])
        raise


def inside_any(path: str, roots) -> bool:
    return any(path.startswith(r.rstrip("/") + "/") for r in roots)


def record_quietly(plan_path, plan: dict) -> None:
    """Write the plan file, on the error path: a failure to write it is not allowed to hide the first error."""
    try:
        write_json_atomic(plan_path, plan)
    except OSError:
        pass
