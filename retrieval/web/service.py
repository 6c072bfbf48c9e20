"""The served index: what the routes of :mod:`retrieval.web.api` and :mod:`retrieval.web.pages` call.

- Searches run in a thread pool sized to the cores, one BLAS thread each (the parallelism is across searches; the
  heavy work, NumPy / OpenCV, releases the GIL). Every thread uses ONE :class:`~retrieval.app.index.Index`: each
  thread has its own SQLite connection, and every search runs on the immutable
  :class:`~retrieval.app.searcher.Searcher` of the generation committed when it started, loaded once per
  generation (again only when a new generation is published, by this server or by ``retrieval index`` in
  another process; the next search sees it, no restart). A search only reads its searcher.
- Writes (an uploaded image added, an image removed) run one at a time in a writer thread, through the same
  :class:`~retrieval.app.index.Index`, under the index's writer lock (the same lock as ``retrieval index``); the
  next generation is built apart and published at once: searches keep reading the last published one meanwhile.
- Duplicates (:mod:`retrieval.web.duplicates`): the groups are computed once per generation, one computation at a
  time; actions on them and their undos are writes (the writer thread).
- Folders and the accent-insensitive filter (:mod:`retrieval.web.folders`): the photos' folders are read once per
  generation too; a page of a folder, or filtered, is cut from them.
- Originals (:mod:`retrieval.web.originals`): a photo's file is found by its catalog id only.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import sqlite3
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from threadpoolctl import threadpool_limits

from retrieval.app.index import Index
from retrieval.app.matches import match_record
from retrieval.app.photo_facts import photo_facts
from retrieval.app.query import Query
from retrieval.engine.params import ParamError, SearchParams
from retrieval.engine.presets import preset_config
from retrieval.features.image import ImageReadError, decode_cost, display_cost
from retrieval.web.budget import DecodeBudget, default_budget_mb
from retrieval.web.duplicates import ServedDuplicates
from retrieval.web.folders import ServedFolders
from retrieval.web.originals import content_type, photo_record
from retrieval.web.thumbs import SIDES, SourceUnreadable, ThumbnailCache
from retrieval.web.uploads import (
    INCOMING,
    UPLOADS,
    ApiError,
    CheckedImage,
    check_image,
    clean_incoming,
    discard,
    field_error,
    read_error,
    store_upload,
)

logger = logging.getLogger(__name__)

MAX_K = 200
"""The largest number of results one search may ask for."""


def encode_cursor(image_id: int) -> str:
    """The opaque keyset cursor of ``GET /api/images`` that names the position after (or before) ``image_id``."""
    return base64.urlsafe_b64encode(f"id:{int(image_id)}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, name: str) -> int:
    """The image id of a cursor from :func:`encode_cursor`; ApiError 400 (one line) for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        kind, _, value = text.partition(":")
        if kind == "id" and value.lstrip("-").isdigit() and -(1 << 63) <= int(value) < (1 << 63):
            return int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ApiError(400, f"{name}={cursor!r}: not a cursor of this API (pass back the 'next' or 'prev' of a "
                        f"previous page as it is).")


def thumbnail_folder(index_path: Path) -> Path:
    """``INDEX/thumbs``, or, when the index cannot be written (a read-only file system, no permission: it is served
    read-only), a folder of the system's temporary directory named after it, so that the pages still get their
    thumbnails."""
    import hashlib
    import tempfile

    from retrieval.app.read_only import read_only_cause

    folder = index_path / "thumbs"
    if read_only_cause(folder if folder.exists() else index_path) is None:
        return folder
    digest = hashlib.blake2b(str(index_path).encode(), digest_size=8).hexdigest()
    logger.info("%s is read-only: thumbnails are kept in the temporary folder", index_path)
    return Path(tempfile.gettempdir()) / f"retrieval-thumbs-{digest}"


def _public_row(row: dict, uploads: Path) -> dict:
    """The JSON record of a catalog row (``GET /api/images``)."""
    return {"id": int(row["id"]), "path": row["path"], "width": row["width"], "height": row["height"],
            "n_features": row["n_features"], "status": row["status"], "hash": row["hash"], "size": row["size"],
            "uploaded": Path(row["path"]).parent == uploads, **({"error": row["error"]} if row["error"] else {})}


class Service:
    """One served index folder.

    Parameters
    ----------
    index_path : str or Path — an existing index folder
    workers : int or None — search threads (default: the number of cores)
    max_upload_bytes : int — larger uploads are refused (413)
    max_megapixels : float or None — larger images are refused (413); default: the preset's
        ``features.max_megapixels`` (the CLI's guard)
    cluster : ``distributed.Client`` or None — search a sharded index's shards on the cluster's workers
        (:meth:`Index.use_cluster <retrieval.app.index.Index.use_cluster>`); None: in this process
    max_decode_mb : float or None — the decode budget (:mod:`retrieval.web.budget`; default: a quarter of the
        machine's memory, 512 to 4,096 MB)
    **index_options : :meth:`Index.open <retrieval.app.index.Index.open>`'s (``verification_cache_mb``,
        ``verify_threads``)
    """

    def __init__(self, index_path, *, workers: int | None = None, max_upload_bytes: int = 20_000_000,
                 max_megapixels: float | None = None, cluster=None, max_decode_mb: float | None = None,
                 **index_options):
        self.path = Path(index_path).resolve()
        self.cluster = cluster
        first = Index.open(self.path)   # refuses a folder that is not an index (one line)
        feats = preset_config(first.preset).features
        first.close()
        self.max_megapixels = float(max_megapixels or feats.max_megapixels)
        self.min_side = int(feats.min_side)
        self.max_side = feats.max_side
        self.budget = DecodeBudget(int(float(max_decode_mb or default_budget_mb()) * (1 << 20)))
        self.max_upload_bytes = int(max_upload_bytes)
        self.workers = int(workers or os.cpu_count() or 1)
        self.uploads = self.path / UPLOADS
        self.in_flight: set[str] = set()   # uploads being received or checked (clean_incoming leaves them)
        # checked uploads by path, while their request holds them: their decoded working image (check_upload)
        self._checked: weakref.WeakValueDictionary[str, CheckedImage] = weakref.WeakValueDictionary()
        stale = clean_incoming(self.uploads)   # uploads interrupted by a stop of the server
        if stale:
            logger.info("removed %d interrupted uploads from %s", stale, self.uploads)
        self.thumbs = ThumbnailCache(thumbnail_folder(self.path))
        # the pool runs searches side by side: each uses ONE BLAS thread (several threads per search on top of the
        # pool oversubscribe the cores; measured 5x slower on 2 cores, docs/benchmarks.md)
        self._blas = threadpool_limits(limits=1)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="retrieval-search")
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="retrieval-write")
        self.index = Index.open(self.path, **index_options)
        if cluster is not None:
            self.index.use_cluster(cluster)
        self.duplicates = ServedDuplicates(self)   # the duplicate groups, kept per generation
        self.folders = ServedFolders(self)   # the photos' folders, kept per generation

    # ------------------------------------------------------------------ decoding within the budget
    def decoding(self, path, what: str, max_side=None, name=None):
        """A reservation of the decode budget for decoding the file at ``path`` (an upload's temporary file: the
        ``name`` its client gave) into the features' working image (:class:`DecodeBudget.reserve` of
        :func:`retrieval.features.image.decode_cost`, an upper bound measured per format): ApiError 413 over the
        per-image limit (or for a header that cannot be read), else waits for room."""
        ext = self.index.extractor
        try:
            cost = decode_cost(path, max_side=ext.max_side if max_side is None else max_side,
                               upscale_to=ext.upscale_to, reduce=ext.reduce, name=name)
        except ImageReadError as exc:
            raise read_error(what, exc.reason) from None
        return self.budget.reserve(cost.bytes, f"{what} ({cost.size[0]}x{cost.size[1]} {cost.format} {cost.mode})")

    def check_upload(self, path, name: str) -> CheckedImage:
        """Decode an upload within the budget with the CLI's guards (:func:`retrieval.web.uploads.check_image`),
        into the working image of the index's extractor: the one decode of the upload (a search or a match of it
        uses the :class:`CheckedImage`'s ``loaded`` image, found by its path while the request holds it)."""
        ext = self.index.extractor
        with self.decoding(path, f"upload {name!r}", name=name):
            checked = check_image(path, name, max_megapixels=self.max_megapixels, min_side=self.min_side,
                                  max_side=ext.max_side, upscale_to=ext.upscale_to, reduce=ext.reduce)
        self._checked[str(checked.path)] = checked
        if Path(checked.path).parent == self.uploads / INCOMING:   # an upload to add (POST /api/images)
            self._store_features(checked)
        return checked

    def _store_features(self, checked: CheckedImage) -> None:
        """The features of an upload to add, extracted from its decoded image into the index's feature store (keyed
        by its content hash, as the index's add would store them): the add finds them there and does not decode the
        file again. When they cannot be written (a full or read-only disk) the add extracts them itself, or is
        refused for the same reason."""
        idx = self.local()
        ext = idx.extractor
        try:
            if not idx.store.has_full(checked.hash, ext.config_key):
                idx.store.put(checked.hash, ext(checked.loaded), ext.config_key)
        except (OSError, ValueError) as exc:
            logger.info("%s: the features of %s were not stored ahead of its add (%s)", self.path, checked.path, exc)

    def _upload_query(self, path, box, decoded=None):
        """The :class:`~retrieval.app.query.Query` of an upload at ``path`` (optionally its ``box``) from its
        working image already decoded (``decoded``, or that of the :class:`CheckedImage` of ``path`` still held by
        its request); None when there is none (then the file is decoded within the budget)."""
        if decoded is None:
            checked = self._checked.get(str(path))
            decoded = checked.loaded if checked is not None else None
        if decoded is None:
            return None
        idx = self.local()
        return Query.from_features(idx.extractor(decoded), box, path=os.path.abspath(str(path)), loaded=decoded)

    def local(self) -> Index:
        """The served :class:`Index` (shared by every thread)."""
        return self.index

    def warm_up(self) -> None:
        """Load the model and the published generation, and run two searches (a process's first search runs
        without the compiled kernels, its second loads them: :mod:`retrieval.app.searcher`), so that no request
        is the slow one."""
        idx = self.index
        page = idx.catalog.page(limit=1)
        first = page.rows[0] if page.rows else None
        if page.generation and first is not None:
            idx.search(first["id"], k=1)
            idx.search(first["id"], k=1)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.writer.shutdown(wait=True, cancel_futures=True)
        self.index.close()
        self._blas.restore_original_limits()

    # ------------------------------------------------------------------ reads
    def _row(self, image_id: int, *, indexed: bool = True) -> dict:
        row = self.local().catalog.row_by_id(int(image_id))
        if row is None or (indexed and row["status"] != "indexed"):
            raise ApiError(404, f"no indexed image with id {image_id}.")
        return row

    def searchable(self, idx: Index) -> int:
        """The generation of ``idx`` when something is searchable; ApiError 503 (first build running) or 409 (empty)."""
        gen = idx.catalog.generation()
        if gen == 0:
            if idx.writer_active():
                raise ApiError(503, "the index is being built by a running 'retrieval index': nothing is searchable "
                                    "before its first commit; try again when it has finished.")
            raise ApiError(409, "the index is empty: add images ('retrieval index PHOTO_DIR', or POST /api/images).")
        return gen

    def search(self, params: SearchParams, *, image_id: int | None = None, image_path=None, box=None,
               decoded=None) -> dict:
        """Search with an indexed image (``image_id``) or an image file (``image_path``, a checked upload),
        optionally restricted to ``box`` (``x1,y1,x2,y2`` in original pixels after EXIF rotation), with the
        request's ``params`` (built by the API from its fields, :func:`retrieval.web.api.search_params`). An upload
        is not decoded again: its working image is ``decoded`` or that of its :class:`CheckedImage`
        (:meth:`check_upload`); a file without one is decoded within the budget."""
        idx = self.local()
        self.searchable(idx)
        if image_id is not None:
            self._row(image_id)
        t0 = time.perf_counter()
        query = None
        try:
            if image_path is not None:
                query = self._upload_query(image_path, box, decoded)
            decoding = self.decoding(image_path, "the query image") if image_path is not None and query is None \
                else nullcontext()
            with decoding:
                image = query if query is not None else int(image_id) if image_id is not None else str(image_path)
                res = idx.search_results(image, bbox=box, params=params)
        except ParamError as exc:
            raise field_error(exc) from None
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        hits = res.hits
        sizes = {str(r["id"]): [r["width"], r["height"]] for r in idx.catalog.rows_by_ids([h.id for h in hits])}
        folders = self.folders.current()
        return {"generation": res.generation, "query": {"id": image_id, "box": box, "k": params.k,
                                                                "rerank": params.rerank},
                "seconds": round(time.perf_counter() - t0, 4), "hits": [h.to_json() for h in hits], "sizes": sizes,
                "folders": {str(h.id): folders.folder_of_id(h.id) for h in hits}}

    def images(self, *, after: str | None = None, before: str | None = None, offset: int | None = None,
               limit: int = 60, q: str | None = None, folder: str | None = None) -> dict:
        """A page of the indexed images (ordered by id), optionally only those of ``folder`` (a folder name of
        :mod:`retrieval.web.folders`; with ``q``, its sub-folders too) whose path contains ``q`` (case- and
        accent-insensitive: ``ete`` finds ``été``): by keyset, ``after`` / ``before`` being the opaque ``next`` /
        ``prev`` cursor of another page (:meth:`Catalog.page <retrieval.app.catalog.Catalog.page>`: no row shown
        twice or skipped when images are added or removed between pages), or by ``offset`` (older callers).
        ``total`` counts every matching image (the catalog's counts without ``q`` nor ``folder``)."""
        if sum(x is not None for x in (after, before, offset)) > 1:
            raise ApiError(400, "give at most one of after, before and offset.")
        cursors = {"after": None if after is None else decode_cursor(after, "after"),
                   "before": None if before is None else decode_cursor(before, "before")}
        q = q if q and q.strip() else None
        if q is None and not folder:
            page = self.local().catalog.page(limit=int(limit), offset=offset, **cursors)
        else:
            page = self.folders.page(folder=folder or None, q=q, limit=int(limit), offset=offset, **cursors)
        rows = page.rows
        return {"generation": page.generation, "total": page.total, "limit": limit, "q": q or "",
                "folder": folder or None, **({"offset": offset} if offset is not None else {}),
                "next": encode_cursor(rows[-1]["id"]) if page.more_after else None,
                "prev": encode_cursor(rows[0]["id"]) if rows and page.more_before else None,
                "images": [_public_row(r, self.uploads) for r in rows]}

    def image(self, image_id: int) -> dict:
        return _public_row(self._row(image_id, indexed=False), self.uploads)

    def facts(self, image_id: int) -> dict:
        """The information panel of an indexed photo (:func:`retrieval.web.originals.photo_record`): its header
        read now (no pixel decoded), its catalog row and its folder."""
        row = self._row(image_id)
        return photo_record(row, photo_facts(row["path"]), self.folders.current().folder_of_id(image_id))

    def original(self, image_id: int) -> tuple[Path, str, str]:
        """(file, file name, content type) of an indexed photo's original, found by its catalog id; ApiError 404
        when the id is unknown or the file is gone."""
        row = self._row(image_id)
        path = Path(row["path"])
        if not path.is_file():
            raise ApiError(404, f"image {image_id} ({row['path']}) is no longer on disk; run 'retrieval index' to "
                                f"update the index.")
        return path, path.name, content_type(path)

    def thumbnail(self, image_id: int, size: str) -> Path:
        """The cached thumbnail of an indexed photo (rendered once, :class:`~retrieval.web.thumbs.ThumbnailCache`):
        decoded reduced (:func:`retrieval.features.image.load_display`) within the decode budget, of which it may
        take the whole (:class:`~retrieval.web.budget.DecodeBudget`: a photo the index holds is always shown)."""
        if size not in SIDES:
            raise ApiError(400, f"size={size!r}: expected one of {', '.join(SIDES)}.")
        row = self._row(image_id)

        def decoding():
            try:
                cost = display_cost(row["path"], SIDES[size])
            except ImageReadError as exc:
                raise SourceUnreadable(row["path"], exc.reason) from None
            return self.budget.reserve(cost.bytes, f"the thumbnail of image {image_id} ({cost.size[0]}x"
                                                   f"{cost.size[1]} {cost.format} {cost.mode})", whole=True)

        try:
            return self.thumbs.get(row["path"], row["hash"], SIDES[size], decoding=decoding)
        except SourceUnreadable as exc:
            raise ApiError(404, f"image {image_id} ({row['path']}) cannot be read for its thumbnail ({exc.reason}); "
                                f"run 'retrieval index' to update the index.") from None

    def info(self) -> dict:
        out = self.local().info()
        out["server"] = {"search_threads": self.workers, "max_upload_bytes": self.max_upload_bytes,
                         "max_megapixels": self.max_megapixels, "backend_loads": self.index.searchers.loads}
        return out

    def match(self, *, a_id: int | None = None, a_path=None, b_id: int, box=None, max_points: int = 300) -> dict:
        """The verified correspondences between a query (an indexed image or a checked upload, optionally its box)
        and the indexed image ``b_id``: the index's one verifier (:meth:`Index.match
        <retrieval.app.index.Index.match>`), so the verdict, the inliers and the box are those of the ranked list."""
        idx = self.local()
        if a_id is not None:
            self._row(a_id)
        rb = self._row(b_id)
        try:
            query = self._upload_query(a_path, box) if a_path is not None else None   # an upload: decoded once
            decoding = self.decoding(a_path, "the query image") if a_path is not None and query is None \
                else nullcontext()
            with decoding:
                image = query if query is not None else int(a_id) if a_id is not None else str(a_path)
                m = idx.match(image, int(b_id), bbox=box)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return match_record(m, a_id=a_id, b_id=int(b_id), b_path=rb["path"], box_given=box is not None,
                            max_points=max_points)

    # ------------------------------------------------------------------ writes (the writer thread)
    def add(self, checked: CheckedImage, name: str) -> tuple[dict, bool]:
        """Store a checked upload under ``INDEX/uploads`` with the file name ``name`` the client gave
        (:func:`retrieval.web.uploads.store_upload`) and index it (:meth:`Writer.add
        <retrieval.app.index_build.Writer.add>`: that file alone; the uploads folder is followed by the index like its
        photo folder). Returns (record, added); an image whose content is already indexed is not stored again (added
        False). Interrupted uploads (``*.part``) are removed after each add. Either the photo is committed and
        searchable (a 2xx), or an error is raised and nothing is kept: no row, no generation, no file in
        ``uploads/`` (a failure after the commit, such as the catalog backup's update, is logged, never answered)."""
        try:
            return self._add(checked, name)
        finally:
            clean_incoming(self.uploads, self.in_flight)

    def _add(self, checked: CheckedImage, name: str) -> tuple[dict, bool]:
        idx = self.index
        same = idx.catalog.rows_by_hash(checked.hash, status="indexed")
        if same:
            discard(checked.path)
            return _public_row(same[0], self.uploads), False
        if not idx.roots and idx.catalog.count():
            discard(checked.path)
            raise ApiError(409, f"{self.path} follows no folder (it was built from a list of files): an upload "
                                f"cannot be added to it.")
        idx.folder.check_writable()   # a read-only index: refused before the upload is stored (503)
        dest = self._store(checked, name)
        try:
            with self.decoding(dest, f"upload {name!r}"):
                # the upload alone, no walk of the followed folders; its path no longer excluded, in the same commit
                idx.writer().add([dest], root=self.uploads)
        except BaseException as exc:
            if self._kept(dest, checked.hash) is None:   # nothing committed: nothing may stay (module docstring)
                self._discard_upload(dest)
                if isinstance(exc, RuntimeError):   # the writer lock is held by another process
                    raise ApiError(409, str(exc)) from None
                if isinstance(exc, ValueError):
                    raise ApiError(409, f"upload {name!r} could not be indexed: {exc}; nothing was kept.") from None
                raise
            logger.warning("%s: upload %r is committed although the add reported %s: %s", self.path, name,
                           type(exc).__name__, exc)
        row = self._kept(dest, checked.hash)
        if row is None or row["status"] != "indexed":
            reason = row["error"] if row else "not found by the sync"
            self._take_back(row, dest)
            raise ApiError(400, f"upload {name!r} could not be indexed: {reason}; nothing was kept.")
        return _public_row(row, self.uploads), True

    def _store(self, checked: CheckedImage, name: str) -> Path:
        """:func:`retrieval.web.uploads.store_upload`; when it fails half-way (the upload linked into ``uploads/``,
        its temporary name not yet removed), the stored copy is deleted before the error is raised."""
        folder = self.uploads
        before = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        try:
            return store_upload(checked, folder, name)
        except BaseException:
            for p in (folder.iterdir() if folder.is_dir() else ()):
                if p.name not in before and p.is_file():
                    self._discard_upload(p)
            raise

    def _discard_upload(self, path) -> None:
        """Delete a stored upload that was not committed (logged when even that fails: the disk refuses writes)."""
        try:
            discard(path)
        except OSError as exc:
            logger.error("%s: the upload %s was not committed and cannot be deleted (%s); delete it before the next "
                         "'retrieval index'", self.path, path, exc)

    def _kept(self, dest, content_hash: str) -> dict | None:
        """The catalog row of the stored upload ``dest`` when a commit kept it (None: nothing was committed, or the
        catalog cannot tell, in which case the file must go: a stray file would be indexed by the next sync)."""
        try:
            row = self.index.catalog.row_by_path(str(dest))
        except (OSError, sqlite3.Error) as exc:
            logger.warning("%s: cannot read the catalog after an add (%s)", self.path, exc)
            return None
        return row if row is not None and row["hash"] == content_hash else None

    def _take_back(self, row: dict | None, dest) -> None:
        """An upload whose add committed an error row (its features could not be read): the row removed and the
        file deleted, so that the error answer leaves nothing (logged when the removal itself fails)."""
        try:
            if row is not None:
                self.index.remove([int(row["id"])])
            self._discard_upload(dest)
        except (OSError, RuntimeError, ValueError, sqlite3.Error) as exc:
            logger.error("%s: the unreadable upload %s could not be taken back (%s)", self.path, dest, exc)

    def remove(self, image_id: int) -> dict:
        """Drop an image from the index (a new generation); an uploaded image's stored file is deleted too, other
        files are never touched. Once the removal is committed the answer is a success: a stored file that cannot
        be deleted is logged (it is excluded from syncs)."""
        idx = self.index
        row = idx.catalog.row_by_id(int(image_id))
        if row is None:
            raise ApiError(404, f"no image with id {image_id} in the index.")
        try:
            idx.remove([int(image_id)])
        except RuntimeError as exc:
            raise ApiError(409, str(exc)) from None
        if Path(row["path"]).parent == self.uploads:
            try:
                discard(row["path"])
            except OSError as exc:
                logger.warning("%s: the removed upload %s was not deleted (%s); it stays excluded from syncs",
                               self.path, row["path"], exc)
        return {"removed": int(image_id), "path": row["path"], "generation": idx.catalog.generation()}
