"""Integrity of an index folder: manifests, damage detection, fallback and repair.

Every published generation (``gens/NNNNNNNN/``), segment (``segments/<name>/``), the model folder (``model/``) and its
verified copy (``model.backup/``) carry ``manifest.json``: the size and BLAKE2b checksum of each of their files.
Opening a generation checks the sizes (cheap); ``retrieval check`` checks the checksums too, and SQLite's
``integrity_check`` of the catalog. A damaged committed generation is refused with one line naming the file, and
searches fall back to the newest intact older generation (with a warning). ``retrieval check --repair`` restores the
catalog from ``catalog.backup.db`` and the model from ``model.backup/`` (or makes it again:
:mod:`retrieval.app.model_repair`), rebuilds the committed generation from the model and the feature store (no
feature is re-extracted) and says what it could not rebuild.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from retrieval.core.persistence import write_json_atomic

logger = logging.getLogger("retrieval.app.index")

MANIFEST = "manifest.json"
CATALOG_BACKUP = "catalog.backup.db"
"""A copy of the catalog kept equal to it after each commit (:meth:`retrieval.app.catalog.Catalog.update_backup`),
restored by ``check --repair``, which also replaces it when it is stale (not at the catalog's generation)."""

__all__ = ["CATALOG_BACKUP", "MANIFEST", "DamagedError", "check_folder", "restore_catalog", "write_manifest"]


class DamagedError(ValueError):
    """A file of an index folder does not match its manifest; ``path`` names it."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


NO_COPY_YET = "missing ('retrieval check --repair' makes it from the model)"
"""The note of an index made before models had a verified copy: ``check`` notes it, it is not damage."""

def _checksum(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder) -> None:
    """Write ``folder/manifest.json``: ``{relative path: {"size", "blake2b"}}`` of every other file in it."""
    folder = Path(folder)
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[p.relative_to(folder).as_posix()] = {"size": p.stat().st_size, "blake2b": _checksum(p)}
    write_json_atomic(folder / MANIFEST, {"format": "retrieval-manifest", "format_version": 1, "files": files})


def check_folder(folder, *, checksums: bool = False) -> list[DamagedError]:
    """Problems of a folder against its manifest (empty: intact, or no manifest: written by an older version).

    ``checksums=False`` compares sizes only (what opening an index does); ``True`` also the checksums."""
    folder = Path(folder)
    mpath = folder / MANIFEST
    if not mpath.exists():
        return []
    try:
        files = json.loads(mpath.read_text("utf-8"))["files"]
    except (ValueError, KeyError, TypeError):
        return [DamagedError(mpath, "unreadable manifest")]
    out = []
    for rel, want in files.items():
        p = folder / rel
        if not p.is_file():
            out.append(DamagedError(p, "missing"))
            continue
        size = p.stat().st_size
        if size != want["size"]:
            out.append(DamagedError(p, f"{size} bytes, expected {want['size']} (truncated or overwritten)"))
        elif checksums and _checksum(p) != want["blake2b"]:
            out.append(DamagedError(p, "checksum mismatch (the content changed on disk)"))
    return out


def check_index(idx, *, checksums: bool = True) -> dict:
    """``retrieval check``: the catalog (SQLite ``integrity_check``), the model folder, its copy and every
    generation on disk against their manifests. Returns ``{"catalog": "ok" or the problem, "model": [problems],
    "model_backup": [problems], "generations": {gen: [problems]}, "committed": gen, "ok": bool}`` (problems as
    one-line strings naming the file). Reads only: a read-only index is checked like any other."""
    rows = [tuple(r) for r in idx.catalog.db.execute("PRAGMA integrity_check").fetchall()]
    catalog = "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])
    folder = idx.folder
    committed = idx.catalog.generation()
    model = [str(p) for p in check_folder(folder.model_dir, checksums=checksums)]
    if not model and (committed or (folder.model_dir / MANIFEST).exists()) and \
            not (folder.model_dir / "model.json").is_file():
        model = [f"{folder.model_dir / 'model.json'}: missing"]
    want_id = (idx.catalog.get_meta("model") or {}).get("id")
    backup = folder.model_copy_problems(checksums=checksums, want_id=want_id)
    gens = {g: [str(x) for x in folder.generation_problems(g, checksums=checksums)]
            for g in folder.generations_on_disk()}
    if committed and committed not in gens:
        gens[committed] = [f"{folder.gen_dir(committed)}: missing"]
    catalog_copy = catalog_backup_problems(folder.path, committed)
    damaged_copy = [p for p in catalog_copy if not p.endswith(STALE)]   # a stale copy is noted, not damage
    damaged_backup = [p for p in backup if not p.endswith(NO_COPY_YET)]   # an index made before the copy existed
    ok = catalog == "ok" and not model and not damaged_backup and not damaged_copy and not any(gens.values())
    return {"catalog": catalog, "catalog_backup": catalog_copy, "model": model, "model_backup": backup,
            "generations": gens, "committed": committed, "ok": ok}


def _read_catalog(path, query: str):
    """The rows of ``query`` on the SQLite file ``path`` opened read-only (as an immutable file when its folder
    cannot be written); sqlite3.DatabaseError when it is not a readable database."""
    import sqlite3

    path = Path(path)
    for uri in (f"{path.resolve().as_uri()}?mode=ro", f"{path.resolve().as_uri()}?immutable=1"):
        try:
            con = sqlite3.connect(uri, uri=True)
        except sqlite3.Error:
            continue
        try:
            return con.execute(query).fetchall()
        except sqlite3.OperationalError:
            continue
        finally:
            con.close()
    raise sqlite3.DatabaseError(f"{path}: cannot be opened")


STALE = "(check --repair makes it again)"


def catalog_backup_problems(index_path, committed: int) -> list[str]:
    """Problems of ``catalog.backup.db`` (one line each): missing (once a generation is committed), not a sound
    database, or stale (not at the ``committed`` generation: a write was stopped between its commit and the copy's
    update; not damage, but ``check --repair`` makes it again, as the next publish does)."""
    import sqlite3

    path = Path(index_path) / CATALOG_BACKUP
    if not path.exists():
        return [f"{path}: missing"] if committed else []
    try:
        if _read_catalog(path, "PRAGMA integrity_check") != [("ok",)]:
            return [f"{path}: damaged (SQLite integrity_check)"]
        row = _read_catalog(path, "SELECT value FROM meta WHERE key = 'generation'")
        have = int(json.loads(row[0][0])) if row else None
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        return [f"{path}: damaged ({exc})"]
    return [] if have == committed else [f"{path}: stale (generation {have}, the catalog is at {committed}) {STALE}"]


def repair_index(idx) -> dict:
    """``retrieval check --repair``: :func:`check_index`, then :meth:`Writer.repair
    <retrieval.app.index_build.Writer.repair>` (the model restored from its copy or made again, a damaged or missing
    committed generation rebuilt from the model and the feature store, damaged older generations removed). Returns
    ``{"repaired": [...], "could_not": [...]}``."""
    return idx.writer().repair(check_index(idx))


def restore_catalog(index_path) -> str | None:
    """``check --repair`` before the index can be opened: when ``catalog.db`` is damaged and the backup taken after
    the last commit is intact, the damaged file is kept as ``catalog.db.damaged`` and the backup copied in its place;
    when ``catalog.db`` is intact but the backup is missing, damaged or stale (not at the catalog's generation: a
    crash came between a commit and the backup's update), the backup is made again from the catalog. Returns what
    was done (None: nothing to do); ValueError when the catalog is damaged and there is nothing to restore from."""
    import shutil
    import sqlite3

    index_path = Path(index_path)
    main, backup = index_path / "catalog.db", index_path / CATALOG_BACKUP

    def healthy(path) -> bool:
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                return con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            finally:
                con.close()
        except sqlite3.DatabaseError:
            return False

    def generation(path) -> int | None:
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                row = con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
                return None if row is None else int(json.loads(row[0]))
            finally:
                con.close()
        except (sqlite3.DatabaseError, ValueError, TypeError):
            return None

    if main.exists() and healthy(main):
        have = generation(backup) if backup.exists() and healthy(backup) else None
        want = generation(main)
        if have is not None and have == want:
            return None
        from retrieval.app.catalog import Catalog

        cat = Catalog(main)
        try:
            cat.backup_to(backup)
        finally:
            cat.close()
        was = "missing or damaged" if have is None else f"stale: generation {have}"
        return f"{backup.name} made again from {main.name} at generation {want} (it was {was})"
    if not backup.exists() or not healthy(backup):
        raise ValueError(f"{main}: the catalog is damaged and there is no intact backup ({backup.name}); rebuild the "
                         f"index ('retrieval index PHOTO_DIR' into a new folder).")
    for suffix in ("-wal", "-shm"):
        Path(str(main) + suffix).unlink(missing_ok=True)
    if main.exists():
        shutil.move(main, str(main) + ".damaged")
    tmp = index_path / "catalog.db.restore"
    shutil.copyfile(backup, tmp)
    tmp.replace(main)
    return f"{main.name} restored from {backup.name} (the damaged file kept as catalog.db.damaged)"


def exact_features_again(store, extractor, rows) -> int:
    """Extract again into ``store`` the full features of the indexed ``rows`` whose entry is compact only (the
    encoders need the exact ones), from their file when it still has the indexed content; returns how many are left
    to be encoded from their compact form (the file gone or changed)."""
    from retrieval.features.store import file_hash

    key, left = extractor.config_key, 0
    for r in rows:
        if store.has_full(r["hash"], key):
            continue
        try:
            if file_hash(r["path"]) != r["hash"]:
                left += 1
                continue
            store.put(r["hash"], extractor(r["path"]), key)
        except Exception:  # noqa: BLE001 - an unreadable file: its compact form is what is left
            left += 1
    return left
