"""Support for :mod:`retrieval.app.index`: the photo-folder walk, the sync report, lazy feature access and
progress bars (results are :class:`retrieval.engine.hits.Hit` records)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from retrieval.core.progress import callback_for, progress_bar
from retrieval.engine.presets import preset_config
from retrieval.features.image import exif_orientation, is_image_name, peek_image, skip_reason

logger = logging.getLogger(__name__)


@dataclass
class SyncReport:
    """What one :meth:`Index.sync` did: files ``added`` and ``changed`` (both counted only once indexed),
    ``moved``, ``removed``, ``unchanged``; ``errors`` the files that failed in this run, with the reason;
    ``failed_before`` the files that had failed before and did not change since (not retried); ``skipped`` the
    files of the walked folders that are not indexed, with the reason (:func:`walk_photos`: ``"not an image"`` or
    ``"unsupported"``)."""

    added: int = 0
    changed: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    failed_before: int = 0
    trained: bool = False
    errors: list[tuple[str, str]] = field(default_factory=list)
    generation: int = 0
    seconds: float = 0.0
    stage_seconds: dict = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        d = asdict(self)
        d["errors"] = [{"path": p, "error": e} for p, e in self.errors]
        d["skipped"] = skipped_json(self.skipped)
        return d


def skipped_by_reason(skipped) -> list[tuple[str, list[str]]]:
    """``[(reason, paths)]`` of ``skipped`` (``(path, reason)`` pairs), the most frequent reason first."""
    by: dict = {}
    for path, reason in sorted(skipped):
        by.setdefault(reason, []).append(path)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _extensions(paths) -> list[str]:
    return sorted({os.path.splitext(p)[1].lower() or "(no extension)" for p in paths})


def skipped_json(skipped) -> dict:
    """The ``skipped`` object of a sync's JSON report: ``{"count", "reasons": [{"reason", "count", "extensions",
    "paths"}]}``, the most frequent reason first."""
    return {"count": len(skipped), "reasons": [{"reason": r, "count": len(ps), "extensions": _extensions(ps),
                                               "paths": ps} for r, ps in skipped_by_reason(skipped)]}


PLURAL = {"not an image": "not images"}


def skipped_summary(skipped, max_extensions: int = 6) -> str:
    """One line for the files a walk left out: ``"3 skipped: 2 not images (.txt), 1 unsupported (.xyz)"``; ``""``
    when none was."""
    if not skipped:
        return ""
    parts = []
    for reason, paths in skipped_by_reason(skipped):
        exts = _extensions(paths)
        shown = ", ".join(exts[:max_extensions]) + (", ..." if len(exts) > max_extensions else "")
        parts.append(f"{len(paths)} {PLURAL.get(reason, reason) if len(paths) > 1 else reason} ({shown})")
    return f"{len(skipped)} skipped: " + ", ".join(parts)


# ---------------------------------------------------------------------------------------------- folder walk
def walk_photos(folder, stats: dict | None = None, skipped: dict | None = None) -> list[str]:
    """Image files under ``folder``, recursively, as sorted absolute paths.

    Names :func:`retrieval.features.image.is_image_name` accepts (the extensions of
    :data:`~retrieval.features.image.IMAGE_EXTENSIONS`, in any case); names starting with ``.`` (hidden files and folders)
    are skipped; symbolic links to folders are followed once (a folder already visited, identified by device
    and inode, is skipped, which breaks symlink loops). ``stats``: filled with each file's
    :func:`file_stat` (read once, by the walk: a sync then needs no other call per file). ``skipped``: filled with
    every other file that is not hidden, ``{path: reason}`` (:func:`retrieval.features.image.skip_reason`:
    ``"not an image"``, ``"unsupported"``).
    """
    root = Path(os.path.expanduser(str(folder)))
    if not root.exists():
        raise FileNotFoundError(f"photo folder {str(root)!r} does not exist.")
    if not root.is_dir():
        raise ValueError(f"{str(root)!r} is not a folder (expected a folder of photos).")
    out = []
    seen = set()
    stack = [os.path.abspath(root)]
    while stack:
        top = stack.pop()
        try:
            st = os.stat(top)
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        subdirs = []
        for e in entries:
            name = e.name
            if name.startswith("."):
                continue
            try:
                if e.is_dir():   # follows a symbolic link to a folder
                    subdirs.append(e.path)
                elif is_image_name(name) and e.is_file():
                    if stats is not None:
                        est = e.stat()   # follows a symbolic link
                        stats[e.path] = (int(est.st_size), float(est.st_mtime_ns) / 1e9)
                    out.append(e.path)
                elif skipped is not None and e.is_file():
                    skipped[e.path] = skip_reason(name)
            except OSError:
                continue
        stack.extend(sorted(subdirs, reverse=True))
    return sorted(out)


def file_stat(path: str) -> tuple[int, float]:
    st = os.stat(path)
    return int(st.st_size), float(st.st_mtime_ns) / 1e9


def image_meta(path: str) -> tuple[int, int, int]:
    """(width, height) after EXIF orientation, and the orientation tag, read from the header only."""
    with peek_image(path) as im:
        w, h = im.size
        orientation = exif_orientation(im)   # 1 when the EXIF block is absent or broken
    if orientation in (5, 6, 7, 8):
        w, h = h, w
    return int(w), int(h), orientation


def progress_callback(enabled, desc: str, total: int, unit: str = "img"):
    """A (callback, close) pair drawing a bar on stderr when ``enabled``."""
    if not enabled:
        return None, (lambda: None)
    bar = progress_bar(total, desc, unit=unit)
    return callback_for(bar), bar.close



class LazyFeatures(Sequence):
    """A sequence of LocalFeatures read from the feature store on access (keeps memory flat)."""

    def __init__(self, store, key, hashes):
        self.store, self.key, self.hashes = store, key, list(hashes)
        self._meta = {}

    def __len__(self):
        return len(self.hashes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        f = self.store.get(self.hashes[i], self.key)
        if f is None:
            raise ValueError(f"feature-store entry {self.hashes[i]} vanished during the sync.")
        self._meta[i] = (len(f), tuple(int(v) for v in f.image_size))
        return f

    def record(self, meta) -> None:
        """Record (n_features, (width, height)) of every item, in order, measured elsewhere (a cluster's workers)."""
        self._meta.update(enumerate(meta))

    def meta(self, i):
        """(n_features, (width, height)) of item ``i`` (recorded when it was read)."""
        if i not in self._meta:
            self[i]
        return self._meta[i]


# Query-time keys whose bundled value rose when the threshold was measured (0.2.0: 9 one-to-one inliers, a 0.03 %
# false-verification rate); an index built with an older copy of a bundled preset uses the current value.
_THRESHOLDS = (("search", "min_inliers"), ("object_search", "min_inliers"))
# Query-time keys a bundled preset set later (0.2.0: the query side of the verification cut to its largest 1,000
# features, and the verification stopped once 20 results verified, both measured with the same mAP); an index built
# with an older copy that lacks the key uses the bundled value.
_ADOPTED = (("search", "verify_query_features"), ("search", "verify_enough"))


def adopt_thresholds(path, stored: dict, current: dict) -> dict:
    """``stored`` with each :data:`_THRESHOLDS` value raised to the bundled preset's ``current`` one, and each
    :data:`_ADOPTED` key it lacks taken from ``current`` (in memory; these keys change no stored data). A lower value in a bundled preset's copy can only come from an older
    release, since ``retrieval index`` takes no overrides."""
    out, cfg = stored, preset_config(current)
    for section, key in _THRESHOLDS:
        old = (stored.get(section) or {}).get(key)
        new = getattr(getattr(cfg, section, None), key, None)
        if isinstance(old, int) and isinstance(new, int) and old < new:
            out = {**out, section: {**out[section], key: new}}
            logger.info("%s: %s.%s %d -> %d (the bundled preset's measured threshold; the index was built with an "
                        "older copy of preset %r)", path, section, key, old, new, stored["name"])
    for section, key in _ADOPTED:
        if key not in (out.get(section) or {}) and key in (current.get(section) or {}):
            out = {**out, section: {**(out.get(section) or {}), key: current[section][key]}}
    return out
