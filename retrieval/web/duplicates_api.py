"""The duplicates routes of the JSON API (``/api/duplicates...``; :mod:`retrieval.web.duplicates` does the work).

Listing and dry runs run in the search pool, actions and undos in the writer thread (one write at a time, as the
other writes); like every write, the POSTs pass the request guard first (:mod:`retrieval.web.guard`). Photos are
named by their id (the page shows them with ``/api/images/{id}/thumbnail``): no route serves a file by a path.
"""

from __future__ import annotations

import os
import tempfile
from typing import Annotated, Literal

from fastapi import APIRouter, File, Query, Request, UploadFile
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from retrieval.web.api import checked_upload, done_with, run, service_of
from retrieval.web.duplicates import parse_kinds

router = APIRouter(prefix="/api", tags=["duplicates"])

Kind = Literal["exact", "formats", "near", "scene"]


class DuplicateAction(BaseModel):
    """An action on the extra copies of the duplicate groups (every photo of a group but its keeper)."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["move", "trash", "link"] = Field(description="move (to 'to', keeping the folder structure), "
                                                                 "trash (the desktop trash) or link (exact copies "
                                                                 "become hard links to their keeper)")
    kinds: list[Kind] | None = Field(None, description="kinds of groups acted on (default: exact and near; "
                                                       "link: exact)")
    to: str | None = Field(None, description="absolute folder on the server the files are moved to (move)")
    groups: list[StrictInt] | None = Field(None, description="only these group numbers (needed to act on scene "
                                                             "and formats groups)")
    confirm: StrictBool = Field(False, description="false: only the plan (nothing changes); true: carry it out")
    generation: StrictInt | None = Field(None, description="the generation of the groups shown (409 when the index "
                                                     "changed since)")
    keepers: dict[int, StrictInt] | None = Field(None, description="the keeper chosen by the user for some groups: "
                                                             "{group number: image id}; the others keep the "
                                                             "suggested one")


class UndoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plan: str = Field(description="the name of a plan file an action returned (a bare name, not a path)")


@router.get("/duplicates", summary="Exact copies, RAW + JPEG pairs, near duplicates and same-scene photos, in groups")
async def duplicates(request: Request,
                     kinds: Annotated[str | None, Query(description="comma list of exact, formats, near, scene "
                                                                    "(default: all)")] = None):
    """`{generation, groups: [{group, kind, keeper (id), keeper_path, keeper_reason, images: [{id, path, size,
    width, height, format, date, camera, mtime, bytes, error, keeper}], pairs: [{a, b, kind, similarity, inliers,
    turn, evidence, regions}]}]}`; a pair's `regions` are the matched boxes `[x0, y0, x1, y1]` in photo a's then
    photo b's pixels. Computed once per generation of the index (the first request may take a while)."""
    svc = service_of(request)
    wanted = parse_kinds(kinds)
    return await run(svc.pool, svc.duplicates.listing, wanted)


@router.post("/duplicates/action", summary="Move, trash or link the extra copies (a dry run unless confirmed)")
async def duplicate_action(request: Request, body: DuplicateAction):
    """Without `confirm`: `{generation, confirmed: false, action, files, bytes, lines, plan}`, nothing changed.
    With `confirm: true`: the plan carried out, `{generation, confirmed: true, action, files, lines, summary: {done,
    skipped, failed, bytes_freed, bytes_not_freed, freed, plan}, plan (the plan file's name, for the undo), steps:
    [{path, status, reason?}]}` (`bytes_freed`: a move on the same disk and the trash free nothing, `freed` says it
    in words); moved and trashed files leave the index."""
    svc = service_of(request)
    options = {"kinds": body.kinds, "to": body.to, "groups": body.groups, "generation": body.generation,
               "keepers": body.keepers}
    if not body.confirm:
        return await run(svc.pool, svc.duplicates.dry_run, body.action, **options)
    return await run(svc.writer, svc.duplicates.apply, body.action, **options)


@router.post("/duplicates/undo", summary="Undo an action carried out, from its plan")
async def duplicate_undo(request: Request, body: UndoRequest):
    """`{generation, summary: {restored, skipped, failed, plan}, plan}`: the files back where they were and in the
    index again."""
    svc = service_of(request)
    return await run(svc.writer, svc.duplicates.undo, body.plan)


@router.post("/duplicates/against", summary="Which of these photos does the index already have?")
async def duplicate_against(request: Request,
                            images: Annotated[list[UploadFile], File(description="image files (not stored)")]):
    """`{results: [{path (the upload's file name), kind (exact, near, scene or null), matches: [{id, path,
    kind}]}]}`, in the order of the uploads. Nothing is added to the index."""
    svc = service_of(request)
    checked = []
    try:
        for upload in images:
            name = os.path.basename((upload.filename or "").replace("\\", "/")) or "upload"
            checked.append((name, await checked_upload(svc, upload, tempfile.gettempdir())))
        return await run(svc.pool, svc.duplicates.against, checked)
    finally:
        for _, c in checked:
            done_with(svc, c.path)
