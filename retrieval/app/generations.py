"""Generations, the trained model folder and the writer lock of an index folder (mixed into
:class:`retrieval.app.index.Index`; layout and crash-safety rules in that module's docstring)."""

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

from retrieval.app.integrity import DamagedError, check_folder
from retrieval.app.shards import make_index_backend, shard_count

logger = logging.getLogger("retrieval.app.index")


class GenerationsMixin:
    """Needs ``self.path`` (the index folder), ``self.catalog``, ``self.preset`` and the backend cache
    ``self._backend`` / ``self._backend_gen``."""

    def _gen_dir(self, gen: int) -> Path:
        return self.path / "gens" / f"{gen:08d}"

    def _model_dir(self) -> Path:
        return self.path / "model"

    def _load_model_into(self, backend) -> bool:
        info_path = self._model_dir() / "model.json"
        if not info_path.exists():
            return False
        problems = check_folder(self._model_dir())
        if problems:
            raise ValueError(f"{problems[0]}: the model is damaged; rebuild the index (or 'retrieval index DIR "
                             f"--model OTHER_INDEX' into a new folder).")
        try:
            info = json.loads(info_path.read_text("utf-8"))
        except ValueError as exc:
            raise ValueError(f"{info_path}: the model is damaged (unreadable JSON: {exc}); rebuild the index.") from None
        if info.get("preset") != self.preset["name"] or info.get("preset_version") != self.preset["version"]:
            raise ValueError(f"{self._model_dir()}: model trained for preset {info.get('preset')!r} version "
                             f"{info.get('preset_version')}, not {self.preset['name']!r} version "
                             f"{self.preset['version']}.")
        manifest = self._model_dir() / "manifest.json"
        backend.model_signature = hashlib.blake2b(manifest.read_bytes(), digest_size=16).hexdigest() \
            if manifest.is_file() else None
        try:
            backend.load_model(self._model_dir(), info)
        except (KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{self._model_dir()}: the model is damaged ({type(exc).__name__}: {exc}); rebuild "
                             f"the index.") from None
        return True

    def _import_model(self, src: Path) -> None:
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
        os.replace(tmp, self._model_dir())
        meta = {"id": info["id"], "trained_on": info.get("trained_on"), "imported": str(src)}
        if info.get("effective"):
            meta["effective"] = info["effective"]
        self.catalog.set_meta(model=meta)

    def _backend_for(self, gen: int, *, fallback: bool = True):
        """The backend with the model and the state of generation ``gen`` (cached per generation). ``fallback``:
        a damaged ``gen`` may be replaced by an older intact generation (searches); writers pass False, since
        building on an older state would lose what the catalog says is indexed."""
        if self._backend is not None and self._backend_gen == gen:
            return self._backend
        backend = make_index_backend(self.preset, shard_count(self.catalog))
        if not self._load_model_into(backend):
            if gen:
                raise ValueError(f"{self.path}: the model folder is missing; the index is damaged.")
            self._backend, self._backend_gen = backend, gen
            return backend
        if gen:
            self._load_intact_state(backend, gen, fallback)
        else:
            backend.load_state(None)
        if fallback and getattr(self, "_search_client", None) is not None and hasattr(backend, "use_remote"):
            backend.use_remote(self._search_client)   # a sharded index searched on a cluster's workers
        self._backend, self._backend_gen = backend, gen
        return backend

    def _load_intact_state(self, backend, gen: int, fallback: bool = True) -> None:
        """Load generation ``gen``; if it is damaged (sizes against its manifest, or an unreadable file), the newest
        intact older generation still on disk, with a warning naming the damaged file (``retrieval check --repair``
        rebuilds it); a ValueError naming the file when none is intact."""
        first = None
        older = sorted((int(p.name) for p in (self.path / "gens").iterdir() if p.name.isdigit() and int(p.name) < gen),
                       reverse=True) if (self.path / "gens").is_dir() else []
        for g in [gen, *older] if fallback else [gen]:
            problems = check_folder(self._gen_dir(g))
            if not problems:
                try:
                    backend.load_state(self._gen_dir(g))
                except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
                    problems = [DamagedError(self._gen_dir(g), f"unreadable ({exc})")]
            if not problems:
                if first is not None:
                    logger.warning("%s; searching generation %d instead (older: recent changes are missing); run "
                                   "'retrieval check --repair --index %s'", first, g, self.path)
                return
            first = first or problems[0]
        raise ValueError(f"{first}; " + ("no intact generation to fall back to" if fallback else
                                         "the index cannot be changed before it is repaired")
                         + f": run 'retrieval check --repair --index {self.path}'.")

    def _cleanup(self, keep: Iterable[int]) -> None:
        keep_names = {f"{g:08d}" for g in keep}
        gens = self.path / "gens"
        if gens.is_dir():
            for p in gens.iterdir():
                if p.name not in keep_names:
                    shutil.rmtree(p, ignore_errors=True)
        shutil.rmtree(self.path / "model.tmp", ignore_errors=True)

    # ------------------------------------------------------------------ writer lock
    def _writer_lock(self):
        """An exclusive lock on ``<index>/.lock`` for the duration of a sync or remove (released by the kernel
        when the process dies, so a killed run never leaves it held)."""
        @contextlib.contextmanager
        def held():
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

        return held()

    def _writer_active(self) -> bool:
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
