"""The index folder and its one way to make data durable: :class:`IndexFolder`.

An :class:`IndexFolder` owns the layout of an index folder (``catalog.db``, ``model/``, ``gens/<generation>/``, the
writer lock ``.lock``) and is the only code that writes a generation: :meth:`IndexFolder.publish` is used by a
sync, a remove (the server's add and delete are a sync and a remove) and ``check --repair``. The steps of a
publish, each a crash point of :func:`retrieval.core.persistence.crash_point`:

1. the backend's state is written into ``gens/<g>.tmp/`` (``array``: inside a file), its manifest (size and
   checksum of every file), every file and the folder fsynced;
2. the folder is renamed to ``gens/<g>/`` and its parent fsynced (``publish``: renamed, not committed: ignored);
3. the catalog changes and the new generation number are committed in ONE SQLite transaction (``catalog``:
   inside it; ``commit``: just after it);
4. the generations no longer needed are removed and ``catalog.backup.db`` is brought to the new state: the same
   changes applied in its own transaction (:meth:`Catalog.update_backup
   <retrieval.app.catalog.Catalog.update_backup>`; a full copy when it is missing or not at the previous
   generation: a crash between the commit and this step leaves it stale, which the next publish and
   ``check --repair`` detect by its generation and replace).

A ``kill -9`` at any step leaves the previous committed state or the new one; the next writer removes the
leftovers. Loading (:meth:`IndexFolder.load_backend`) checks the generation against its manifest and may fall back
to the newest intact older generation for searches (never for writers).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path

from retrieval.app.catalog import CatalogChanges
from retrieval.app.integrity import CATALOG_BACKUP, DamagedError, check_folder, write_manifest
from retrieval.app.shards import make_index_backend
from retrieval.core.persistence import crash_point, fsync_dir
from retrieval.engine.segments import segment_names

logger = logging.getLogger("retrieval.app.index")


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
        """The segment folders generation ``gen`` references (:mod:`retrieval.engine.segments`)."""
        return [self.segments_dir / name for name in segment_names(self.gen_dir(gen))]

    def state_bytes(self, gen: int) -> int:
        """Bytes of generation ``gen``'s search state: its folder and the segments it lists (the integrity
        manifests, a few hundred bytes per file, left out)."""
        total = 0
        for folder in [self.gen_dir(gen), *self.segment_dirs(gen)]:
            if folder.is_dir():
                total += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json")
        return total

    def generation_problems(self, gen: int, *, checksums: bool = False) -> list[DamagedError]:
        """Problems of generation ``gen`` and of every segment it references, against their manifests."""
        problems = check_folder(self.gen_dir(gen), checksums=checksums)
        for seg in self.segment_dirs(gen):
            problems += [DamagedError(seg, "missing")] if not seg.is_dir() else check_folder(seg, checksums=checksums)
        return problems

    def generations_on_disk(self) -> list[int]:
        """Published generation folders present, oldest first."""
        if not self.gens_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.gens_dir.iterdir() if p.name.isdigit())

    def cleanup(self, keep: Iterable[int]) -> None:
        """Remove every generation folder but ``keep`` (temporary ones included) and a leftover ``model.tmp``."""
        keep = list(keep)
        keep_names = {f"{g:08d}" for g in keep}
        if self.gens_dir.is_dir():
            for p in self.gens_dir.iterdir():
                if p.name not in keep_names:
                    shutil.rmtree(p, ignore_errors=True)
        if self.segments_dir.is_dir():   # segments no kept generation references (and unpublished ones)
            used = {name for g in keep for name in segment_names(self.gen_dir(g))}
            for p in self.segments_dir.iterdir():
                if p.name not in used:
                    shutil.rmtree(p, ignore_errors=True)
        shutil.rmtree(self.path / "model.tmp", ignore_errors=True)

    # ------------------------------------------------------------------ writer lock
    @contextlib.contextmanager
    def writer_lock(self):
        """An exclusive lock on ``<index>/.lock`` for the duration of a sync, remove or repair (released by the
        kernel when the process dies, so a killed run never leaves it held)."""
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"another 'retrieval index' or 'remove' is writing to {self.path}; "
                                   f"wait for it to finish.") from None
            yield
        finally:
            os.close(fd)

    def writer_active(self) -> bool:
        """True while another process holds the writer lock (a sync or remove is running)."""
        try:
            fd = os.open(self.path / ".lock", os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)   # closing releases a lock we took
        return False

    # ------------------------------------------------------------------ the model
    def model_signature(self) -> str | None:
        """The hash of the model's manifest (None without one): two backends with the same signature describe
        database images the same way."""
        manifest = self.model_dir / "manifest.json"
        return hashlib.blake2b(manifest.read_bytes(), digest_size=16).hexdigest() if manifest.is_file() else None

    def load_model_into(self, backend) -> bool:
        """Load ``model/`` into ``backend``; False when there is no model yet; ValueError (one line) when damaged or
        trained for another preset."""
        info_path = self.model_dir / "model.json"
        if not info_path.exists():
            return False
        problems = check_folder(self.model_dir)
        if problems:
            raise ValueError(f"{problems[0]}: the model is damaged; rebuild the index (or index the photos into a "
                             f"new folder with the model of another index: 'retrieval index DIR --model OTHER_INDEX').")
        try:
            info = json.loads(info_path.read_text("utf-8"))
        except ValueError as exc:
            raise ValueError(f"{info_path}: the model is damaged (unreadable JSON: {exc}); rebuild the index.") from None
        if info.get("preset") != self.preset["name"] or info.get("preset_version") != self.preset["version"]:
            raise ValueError(f"{self.model_dir}: model trained for preset {info.get('preset')!r} version "
                             f"{info.get('preset_version')}, not {self.preset['name']!r} version "
                             f"{self.preset['version']}.")
        try:
            backend.load_model(self.model_dir, info)
        except (KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{self.model_dir}: the model is damaged ({type(exc).__name__}: {exc}); rebuild "
                             f"the index.") from None
        return True

    def import_model(self, src) -> dict:
        """Copy a trained model folder (an index folder or its ``model/``) into ``model/``; returns the catalog's
        ``model`` record. ValueError when it is not a model or was trained for another preset."""
        src = Path(src)
        if (src / "model" / "model.json").exists():
            src = src / "model"
        if not (src / "model.json").exists():
            raise ValueError(f"{src}: not a trained model folder (no model.json; give an index folder or its "
                             f"model/ folder).")
        info = json.loads((src / "model.json").read_text("utf-8"))
        if info.get("preset") != self.preset["name"] or info.get("preset_version") != self.preset["version"]:
            raise ValueError(f"{src}: model trained for preset {info.get('preset')!r} version "
                             f"{info.get('preset_version')}; this index uses {self.preset['name']!r} version "
                             f"{self.preset['version']}.")
        tmp = self.path / "model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        os.replace(tmp, self.model_dir)
        meta = {"id": info["id"], "trained_on": info.get("trained_on"), "imported": str(src)}
        if info.get("effective"):
            meta["effective"] = info["effective"]
        return meta

    def write_model(self, backend, info: dict) -> None:
        """Save ``backend``'s trained model: ``model.tmp/`` with ``model.json`` (``info``) and its manifest, fsynced,
        then renamed to ``model/``."""
        from retrieval.core.persistence import write_json_atomic

        tmp = self.path / "model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        info = {**backend.save_model(tmp), **info}
        effective = dict(backend.effective or {})
        if effective:  # preset parameters reduced to fit a small training set (pipeline.record_reduction)
            info["effective"] = effective
        write_json_atomic(tmp / "model.json", info)
        write_manifest(tmp)
        fsync_dir(tmp)
        shutil.rmtree(self.model_dir, ignore_errors=True)
        os.replace(tmp, self.model_dir)
        fsync_dir(self.path)

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

    def publish(self, catalog, backend, changes: CatalogChanges, *, after: int, keep_previous: bool = True) -> int:
        """Make a new generation durable and current (module docstring): ``backend``'s state written to the
        generation after ``max(after, every generation on disk)``, then the catalog ``changes`` committed with it
        in one transaction. Returns the new generation number. ``keep_previous``: keep generation ``after`` on
        disk (the fallback of searches that still read it)."""
        new_gen = max([after, *self.generations_on_disk()]) + 1
        tmp = self.gens_dir / f"{new_gen:08d}.tmp"
        final = self.gen_dir(new_gen)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        tmp.mkdir(parents=True)
        if backend.trained:
            backend.save_state(tmp)   # new segments go to segments/<name>.tmp (retrieval.engine.segments)
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
        crash_point("commit")
        self.cleanup(keep=[after, new_gen] if keep_previous else [new_gen])
        catalog.update_backup(self.path / CATALOG_BACKUP, changes, previous=previous)
        return new_gen
