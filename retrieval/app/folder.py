"""The index folder and its one way to make data durable: :class:`IndexFolder`.

An :class:`IndexFolder` owns the layout of an index folder (``catalog.db``, ``model/`` and its verified copy
``model.backup/``, ``gens/<generation>/``, ``segments/``, the writer lock ``.lock``) and is the only code that writes
a generation: :meth:`IndexFolder.publish` is used by a sync, a remove (the server's add and delete are a sync and a
remove), a merge and ``check --repair``. The steps of a publish, each a crash point of
:func:`retrieval.core.persistence.crash_point`:

1. the backend's state is written into ``gens/<g>.tmp/`` (``array``: inside a file), its new segments sealed
   (``segments``), its manifest (size and checksum of every file), every file and the folder fsynced;
2. the folder is renamed to ``gens/<g>/`` and its parent fsynced (``publish``: renamed, not committed: ignored);
3. the catalog changes and the new generation number are committed in ONE SQLite transaction (``catalog``:
   inside it; ``commit``: just after it);
4. the new generation is loaded again from disk (its files against the manifests, then its state); only when it
   loads intact are the generations no longer needed and their segments removed (``cleanup``: just before);
5. ``catalog.backup.db`` is brought to the new state (``backup``: just before): the same changes applied in its own
   transaction (:meth:`Catalog.update_backup <retrieval.app.catalog.Catalog.update_backup>`; a full copy when it is
   missing or not at the previous generation: a crash or a failure between the commit and this step leaves it
   stale, which the next publish and ``check --repair`` detect by its generation and replace).

A failure before the commit removes what the publish wrote and raises: nothing is kept. A failure after it (the
clean-up, the backup) is logged and the publish succeeds: the change is committed and searchable, what is left over
is removed by the next writer. A ``kill -9`` at any step leaves the previous committed state or the new one; the
next writer removes the leftovers (:meth:`IndexFolder.clear_leftovers`), and nothing is removed while a state file
that says which segments are in use cannot be read. Loading (:meth:`IndexFolder.load_backend`) checks the
generation against its manifest and may fall back to the newest intact older generation for searches (never for
writers).

A folder the process cannot write to (a read-only file system, no permission) is refused by every writer at once
with :class:`IndexReadOnly` (one line naming the cause); searches read it as any other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import zipfile
from collections.abc import Iterable
from pathlib import Path

from retrieval.app.catalog import CatalogChanges
from retrieval.app.integrity import CATALOG_BACKUP, MANIFEST, DamagedError, check_folder, write_manifest
from retrieval.app.model_files import (
    MODEL_BACKUP,
    import_model_folder,
    install_model,
    model_copy_problems,
    model_id,
)
from retrieval.app.read_only import check_writable, writer_active, writer_lock
from retrieval.app.shards import make_index_backend
from retrieval.core.persistence import crash_point, fsync_dir, write_json_atomic
from retrieval.engine.segments import UnreadableState, segment_names

logger = logging.getLogger("retrieval.app.index")

MODEL_ID = "model_id.json"
"""The file of a generation that names the model its state was encoded with (``{"model_id": ...}``)."""


class IndexFolder:
    """The layout, the writer lock, the model folder and the generations of one index folder.

    Parameters
    ----------
    path : str or Path — the index folder
    preset : dict — the index's preset (what its model and generations are built with)
    shards : int — shards of the searchable state (:mod:`retrieval.app.shards`)
    """

    def __init__(self, path, preset: dict, shards: int = 1):
        self.path = Path(path)
        self.preset = preset
        self.shards = int(shards)

    # ------------------------------------------------------------------ layout
    def gen_dir(self, gen: int) -> Path:
        return self.path / "gens" / f"{gen:08d}"

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    @property
    def gens_dir(self) -> Path:
        return self.path / "gens"

    @property
    def segments_dir(self) -> Path:
        return self.path / "segments"

    def segment_dirs(self, gen: int) -> list[Path]:
        """The segment folders generation ``gen`` references (:mod:`retrieval.engine.segments`);
        :class:`~retrieval.engine.segments.UnreadableState` when its ``state.json`` cannot be read."""
        return [self.segments_dir / name for name in segment_names(self.gen_dir(gen))]

    def state_bytes(self, gen: int) -> int:
        """Bytes of generation ``gen``'s search state: its folder and the segments it lists (the integrity
        manifests, a few hundred bytes per file, left out)."""
        total = 0
        try:
            segments = self.segment_dirs(gen)
        except UnreadableState:
            segments = []
        for folder in [self.gen_dir(gen), *segments]:
            if folder.is_dir():
                total += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json")
        return total

    def generation_problems(self, gen: int, *, checksums: bool = False) -> list[DamagedError]:
        """Problems of generation ``gen`` and of every segment it references, against their manifests; and a
        generation encoded with another model than ``model/`` holds (its ``model_id.json``)."""
        problems = check_folder(self.gen_dir(gen), checksums=checksums)
        encoded_with = self.gen_dir(gen) / MODEL_ID
        if not problems and encoded_with.is_file():
            try:
                want = json.loads(encoded_with.read_text("utf-8"))["model_id"]
            except (OSError, ValueError, KeyError, TypeError):
                want = None
            have = model_id(self.model_dir)
            if have is not None and want != have:
                problems.append(DamagedError(encoded_with, f"encoded with model {want!r}, not with the index's model "
                                                           f"{have!r}"))
        try:
            segments = self.segment_dirs(gen)
        except UnreadableState as exc:
            return problems or [DamagedError(self.gen_dir(gen) / "state.json", str(exc).split(": ", 1)[-1])]
        for seg in segments:
            problems += [DamagedError(seg, "missing")] if not seg.is_dir() else check_folder(seg, checksums=checksums)
        return problems

    def generations_on_disk(self) -> list[int]:
        """Published generation folders present, oldest first."""
        if not self.gens_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.gens_dir.iterdir() if p.name.isdigit())

    def _referenced_segments(self, gens: Iterable[int]) -> set[str] | None:
        """The segment names the generations ``gens`` reference, or None when that is not known for one of them
        (its ``state.json`` unreadable, or missing while its manifest lists it): no segment may then be removed."""
        used = set()
        for g in gens:
            folder = self.gen_dir(g)
            if not folder.is_dir():
                continue
            try:
                names = segment_names(folder)
            except UnreadableState as exc:
                logger.warning("%s; no segment is removed until 'retrieval check --repair'", exc)
                return None
            if not names and not (folder / "state.json").exists():
                try:   # a generation without a state (nothing trained) lists no state.json in its manifest
                    listed = "state.json" in json.loads((folder / MANIFEST).read_text("utf-8"))["files"]
                except (OSError, ValueError, KeyError, TypeError):
                    listed = True
                if listed:
                    logger.warning("%s: missing; no segment is removed until 'retrieval check --repair'",
                                   folder / "state.json")
                    return None
            used.update(names)
        return used

    def _remove_unused_segments(self, gens: Iterable[int]) -> None:
        """Remove the sealed segments none of ``gens`` references, and the unsealed ones (``*.tmp``): only when
        every one of ``gens`` says which it uses."""
        if not self.segments_dir.is_dir():
            return
        used = self._referenced_segments(gens)
        for p in self.segments_dir.iterdir():
            if p.name.endswith(".tmp") or (used is not None and p.name not in used):
                shutil.rmtree(p, ignore_errors=True)

    def _remove_model_leftovers(self) -> None:
        for name in ("model.tmp", f"{MODEL_BACKUP}.tmp"):
            shutil.rmtree(self.path / name, ignore_errors=True)

    def clear_leftovers(self, committed: int) -> None:
        """Remove what an interrupted or failed writer left: temporary folders, generations newer than the
        ``committed`` one (published, never committed) and the segments no remaining generation uses. Generations
        up to ``committed`` are kept (the fallback of searches; older ones go once a new generation loads intact,
        :meth:`cleanup`)."""
        if self.gens_dir.is_dir():
            for p in self.gens_dir.iterdir():
                if not p.name.isdigit() or int(p.name) > committed:
                    shutil.rmtree(p, ignore_errors=True)
        self._remove_unused_segments(self.generations_on_disk())
        self._remove_model_leftovers()

    def cleanup(self, keep: Iterable[int]) -> None:
        """Remove every generation folder but ``keep`` (temporary ones included), the segments no kept generation
        references (none when one of them cannot say which it uses) and a leftover ``model.tmp``. Called only once
        the newest of ``keep`` has loaded intact."""
        keep = list(keep)
        keep_names = {f"{g:08d}" for g in keep}
        if self.gens_dir.is_dir():
            for p in self.gens_dir.iterdir():
                if p.name not in keep_names:
                    shutil.rmtree(p, ignore_errors=True)
        self._remove_unused_segments(keep)
        self._remove_model_leftovers()

    # ------------------------------------------------------------------ writer lock
    def check_writable(self) -> None:
        """:class:`~retrieval.app.read_only.IndexReadOnly` (one line naming the cause) when this process cannot write
        the index folder, its catalog or its state folders."""
        check_writable(self.path, (self.path / "catalog.db", self.gens_dir, self.segments_dir, self.model_dir))

    def writer_lock(self):
        """An exclusive lock on ``<index>/.lock`` for the duration of a write (:func:`retrieval.app.read_only.
        writer_lock`: IndexReadOnly when the folder cannot be written, RuntimeError when another writer holds it)."""
        return writer_lock(self.path, self.check_writable)

    def writer_active(self) -> bool:
        """True while another process holds the writer lock (:func:`retrieval.app.read_only.writer_active`)."""
        return writer_active(self.path)

    # ------------------------------------------------------------------ the model
    def model_signature(self) -> str | None:
        """The hash of the model's manifest (None without one): two backends with the same signature describe
        database images the same way."""
        manifest = self.model_dir / "manifest.json"
        return hashlib.blake2b(manifest.read_bytes(), digest_size=16).hexdigest() if manifest.is_file() else None

    def _repair_hint(self) -> str:
        return (f"run 'retrieval check --repair --index {self.path}' (the model is restored from its verified copy "
                f"{MODEL_BACKUP}/, or learnt again from the stored features)")

    def load_model_into(self, backend) -> bool:
        """Load ``model/`` into ``backend``; False when there is no model yet; ValueError (one line) when damaged or
        trained for another preset."""
        info_path = self.model_dir / "model.json"
        if not info_path.exists():
            if (self.model_dir / MANIFEST).exists():
                raise ValueError(f"{info_path}: missing; the model is damaged: {self._repair_hint()}.")
            return False
        problems = check_folder(self.model_dir)
        if problems:
            raise ValueError(f"{problems[0]}: the model is damaged: {self._repair_hint()}.")
        try:
            info = json.loads(info_path.read_text("utf-8"))
        except ValueError as exc:
            raise ValueError(f"{info_path}: the model is damaged (unreadable JSON: {exc}): {self._repair_hint()}."
                             ) from None
        if info.get("preset") != self.preset["name"] or info.get("preset_version") != self.preset["version"]:
            raise ValueError(f"{self.model_dir}: model trained for preset {info.get('preset')!r} version "
                             f"{info.get('preset_version')}, not {self.preset['name']!r} version "
                             f"{self.preset['version']}.")
        try:
            backend.load_model(self.model_dir, info)
        except (KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{self.model_dir}: the model is damaged ({type(exc).__name__}: {exc}): "
                             f"{self._repair_hint()}.") from None
        return True

    def import_model(self, src) -> dict:
        """Copy a trained model folder (an index folder or its ``model/``) into ``model/`` with its verified copy;
        returns the catalog's ``model`` record (:func:`retrieval.app.model_files.import_model_folder`)."""
        return import_model_folder(self.path, self.preset, src)

    def write_model(self, backend, info: dict, *, training: list[str] | None = None, tmp=None) -> None:
        """Save ``backend``'s trained model: ``model.tmp/`` with ``model.json`` (``info``), ``training.json`` (the
        content hashes of the ``training`` images, in their order) and its manifest, fsynced, then installed as
        ``model/`` with its verified copy ``model.backup/`` (:func:`retrieval.app.model_files.install_model`).
        ``tmp``: write the folder there and install nothing (a model learnt again, compared before it is
        installed)."""
        install = tmp is None
        tmp = Path(tmp) if tmp is not None else self.path / "model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            info = {**backend.save_model(tmp), **info}
            effective = dict(backend.effective or {})
            if effective:  # preset parameters reduced to fit a small training set (pipeline.record_reduction)
                info["effective"] = effective
            write_json_atomic(tmp / "model.json", info)
            if training is not None:
                write_json_atomic(tmp / "training.json", {"hashes": list(training)})
            write_manifest(tmp)
            if install:
                install_model(self.path, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if install:
            shutil.rmtree(tmp, ignore_errors=True)

    def model_copy_problems(self, *, checksums: bool, want_id: str | None) -> list[str]:
        """Problems of ``model.backup/`` (:func:`retrieval.app.model_files.model_copy_problems`)."""
        return model_copy_problems(self.path, checksums=checksums, want_id=want_id)

    def remove_model(self) -> None:
        """Remove ``model/`` and its copy: a first sync that failed before its commit takes back the model it
        installed (nothing references it)."""
        for folder in (self.model_dir, self.path / MODEL_BACKUP):
            shutil.rmtree(folder, ignore_errors=True)
        self._remove_model_leftovers()

    # ------------------------------------------------------------------ loading a generation
    def new_backend(self):
        """An empty backend of the index's preset and shard count (no model loaded)."""
        return make_index_backend(self.preset, self.shards)

    def load_backend(self, gen: int, *, fallback: bool):
        """A backend with the model and the state of generation ``gen`` (0: empty). ``fallback``: a damaged ``gen``
        may be replaced by the newest intact older one, with a warning (searches); writers pass False, since
        building on an older state would lose what the catalog says is indexed."""
        backend = self.new_backend()
        if not self.load_model_into(backend):
            if gen:
                raise ValueError(f"{self.path}: the model folder is missing; the index is damaged.")
            return backend
        if not gen:
            backend.load_state(None)
            return backend
        first = None
        older = [g for g in reversed(self.generations_on_disk()) if g < gen]
        for g in [gen, *older] if fallback else [gen]:
            problems = self.generation_problems(g)
            if not problems:
                try:
                    backend.load_state(self.gen_dir(g))
                except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
                    problems = [DamagedError(self.gen_dir(g), f"unreadable ({exc})")]
            if not problems:
                if first is not None:
                    logger.warning("%s; searching generation %d instead (older: recent changes are missing); run "
                                   "'retrieval check --repair --index %s'", first, g, self.path)
                return backend
            first = first or problems[0]
        raise ValueError(f"{first}; " + ("no intact generation to fall back to" if fallback else
                                         "the index cannot be changed before it is repaired")
                         + f": run 'retrieval check --repair --index {self.path}'.")

    # ------------------------------------------------------------------ publish
    def _seal_segments(self) -> None:
        """Make the segments a save just wrote durable: each ``segments/<name>.tmp/`` gets its manifest, is
        fsynced and renamed to ``segments/<name>/`` (unreferenced until the generation is committed)."""
        if not self.segments_dir.is_dir():
            return
        sealed = False
        for tmp in sorted(self.segments_dir.glob("*.tmp")):
            write_manifest(tmp)
            for p in [*tmp.rglob("*"), tmp]:
                if p.is_dir():
                    fsync_dir(p)
            os.replace(tmp, self.segments_dir / tmp.name[:-len(".tmp")])
            sealed = True
        if sealed:
            fsync_dir(self.segments_dir)
        crash_point("segments")

    def _segment_entries(self) -> set[str]:
        return {p.name for p in self.segments_dir.iterdir()} if self.segments_dir.is_dir() else set()

    def _forget(self, folders, segments_before: set[str] | None) -> None:
        """Take back an uncommitted publish: its generation folders and the segments it added (None: only the
        unsealed ones); best effort: what a failure leaves is a leftover the next writer removes."""
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        for name in self._segment_entries():
            if name.endswith(".tmp") or (segments_before is not None and name not in segments_before):
                shutil.rmtree(self.segments_dir / name, ignore_errors=True)

    def publish(self, catalog, backend, changes: CatalogChanges, *, after: int, keep_previous: bool = True) -> int:
        """Make a new generation durable and current (module docstring): ``backend``'s state written to the
        generation after ``max(after, every generation on disk)``, then the catalog ``changes`` committed with it
        in one transaction. Returns the new generation number. ``keep_previous``: keep generation ``after`` on
        disk (the fallback of searches that still read it). An exception means nothing was committed and what the
        publish wrote is removed; after the commit nothing raises (a failed clean-up or backup update is logged)."""
        new_gen = max([after, *self.generations_on_disk()]) + 1
        tmp = self.gens_dir / f"{new_gen:08d}.tmp"
        final = self.gen_dir(new_gen)
        before = self._segment_entries()
        made = [d for d in (self.gens_dir, self.segments_dir) if not d.exists()]   # by this publish (the first)
        previous = None
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)
            tmp.mkdir(parents=True)
            if backend.trained:
                backend.save_state(tmp)   # new segments go to segments/<name>.tmp (retrieval.engine.segments)
                encoded_with = model_id(self.model_dir)
                if encoded_with is not None:
                    write_json_atomic(tmp / MODEL_ID, {"model_id": encoded_with})
            self._seal_segments()
            write_manifest(tmp)
            for p in tmp.rglob("*"):
                if p.is_dir():
                    fsync_dir(p)
            fsync_dir(tmp)
            os.replace(tmp, final)
            fsync_dir(self.gens_dir)
            crash_point("publish")  # the new generation exists but is not committed: it must be ignored
            previous = catalog.generation()
            catalog.commit_sync(run_id=changes.run_id, generation=new_gen, next_id=changes.next_id,
                                upserts=changes.upserts, deletes=changes.deletes, moves=changes.moves,
                                stats=changes.stats, extra_meta=changes.extra_meta)
        except BaseException as exc:
            committed = self._committed(catalog, new_gen)
            if committed is False:
                self._forget([tmp, final], before)
                for folder in made:   # left empty by the first publish
                    with contextlib.suppress(OSError):
                        folder.rmdir()
            elif committed is None:   # unknown: the generation may be the committed one; only the unsealed go
                self._forget([tmp], None)
            if not committed:
                raise
            logger.warning("%s: generation %d is committed although the commit reported %s: %s", self.path, new_gen,
                           type(exc).__name__, exc)
        crash_point("commit")
        self._after_commit(catalog, backend, changes, new_gen, [after, new_gen] if keep_previous else [new_gen],
                           new_gen - 1 if previous is None else previous)
        return new_gen

    @staticmethod
    def committed_generation(catalog) -> int | None:
        """The catalog's committed generation, None when the catalog cannot be read (after a failed write)."""
        try:
            return catalog.generation()
        except (sqlite3.Error, OSError):
            return None

    def _committed(self, catalog, gen: int) -> bool | None:
        """Whether ``gen`` is the catalog's committed generation (None: the catalog cannot be read)."""
        committed = self.committed_generation(catalog)
        return None if committed is None else committed == gen

    def _after_commit(self, catalog, backend, changes: CatalogChanges, new_gen: int, keep: list[int],
                      previous: int) -> None:
        """Steps 4 and 5 of a publish (module docstring): never raise, the change being committed."""
        try:
            problems = self.generation_problems(new_gen)
            if problems:
                raise problems[0]
            if backend.trained:
                backend.load_state(self.gen_dir(new_gen))   # the new generation loads from disk
            intact = True
        except Exception as exc:  # noqa: BLE001 - whatever the cause, the older generations stay
            intact = False
            logger.error("%s: generation %d is committed but does not load intact (%s); the older generations are "
                         "kept: run 'retrieval check --repair --index %s'", self.path, new_gen, exc, self.path)
        crash_point("cleanup")
        if intact:
            try:
                self.cleanup(keep)
            except Exception as exc:  # noqa: BLE001 - leftovers, removed by the next writer
                logger.warning("%s: the generations no longer needed were not all removed (%s); the next writer "
                               "removes them", self.path, exc)
        crash_point("backup")
        try:
            catalog.update_backup(self.path / CATALOG_BACKUP, changes, previous=previous)
        except Exception as exc:  # noqa: BLE001 - the change is committed: a stale copy is noted and made again
            logger.warning("%s: %s was not brought to generation %d (%s); the change is committed, and the next "
                           "publish or 'retrieval check --repair' makes the copy again", self.path, CATALOG_BACKUP,
                           new_gen, exc)
