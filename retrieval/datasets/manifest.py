"""Dataset manifests: the official file lists that a dataset folder is checked against.

A manifest is a JSON file in ``retrieval/data/manifests/<dataset>.json`` (format ``retrieval-dataset-manifest``,
version 1, documented in docs/formats.md)::

    {"format": "retrieval-dataset-manifest", "format_version": 1, "dataset": "oxford5k",
     "description": "...", "homepage": "...", "terms": "...", "lists_from": "...",
     "filesets": [{"name": "images", "folder": "jpg", "names": ["all_souls_000000.jpg", ...], "count": 5063},
                  {"name": "ground truth", "folder": "gt_files_170407", "names": [...], "count": 220}],
     "archives": [{"url": "https://...", "filename": "oxbuild_images.tgz", "into": "jpg", "flatten": true,
                   "md5": null, "sha256": null, "size": null}],
     "checksums": {"jpg/x.jpg": "<md5>", ...}}        # optional: per-file md5 where the release gives them

A fileset may list its names as ``"name_range": {"format": "ukbench{:05d}.jpg", "start": 0, "stop": 10200}``.
A fileset may give only ``count`` (and ``pattern``, a glob) when the official list is too large to ship or not
available (Flickr100k, R1M): then the check counts the files. ``md5``/``sha256`` of an archive are ``null`` when the
official release publishes none; the downloader then records the sha256 it saw (see :mod:`.download`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

MANIFEST_FORMAT = "retrieval-dataset-manifest"
MANIFEST_VERSION = 1


def manifest_names() -> list:
    """Datasets with a bundled manifest, sorted."""
    folder = resources.files("retrieval") / "data" / "manifests"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def validate_manifest(m, where: str) -> dict:
    """Check a manifest's structure; returns it. ``ValueError`` naming ``where`` and the problem."""
    if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"manifest {where}: expected a JSON object with format {MANIFEST_FORMAT!r}.")
    if m.get("format_version") != MANIFEST_VERSION:
        raise ValueError(f"manifest {where}: format_version {m.get('format_version')!r} is not supported "
                         f"(expected {MANIFEST_VERSION}).")
    for key in ("dataset", "filesets"):
        if key not in m:
            raise ValueError(f"manifest {where}: missing key {key!r}.")
    for i, fs in enumerate(m["filesets"]):
        rng = fs.get("name_range")
        if rng is not None and "names" not in fs:  # e.g. ukbench00000.jpg .. ukbench10199.jpg
            fs["names"] = [rng["format"].format(k) for k in range(int(rng["start"]), int(rng["stop"]))]
        if "folder" not in fs or ("names" not in fs and "count" not in fs):
            raise ValueError(f"manifest {where}: filesets[{i}] needs 'folder' and 'names' or 'count'.")
        for n in fs.get("names") or []:
            if Path(n).is_absolute() or ".." in Path(n).parts:
                raise ValueError(f"manifest {where}: filesets[{i}] name {n!r} must be a relative path.")
    for i, a in enumerate(m.get("archives", [])):
        if "url" not in a or "filename" not in a:
            raise ValueError(f"manifest {where}: archives[{i}] needs 'url' and 'filename'.")
        if "/" in a["filename"] or "\\" in a["filename"] or a["filename"] in ("", ".", ".."):
            raise ValueError(f"manifest {where}: archives[{i}] filename {a['filename']!r} must be a plain name.")
        into = a.get("into", ".")
        if Path(into).is_absolute() or ".." in Path(into).parts:
            raise ValueError(f"manifest {where}: archives[{i}] 'into' {into!r} must be a folder inside the root.")
    return m


def load_manifest(dataset) -> dict:
    """A bundled manifest by dataset name, or a manifest JSON file by path."""
    text = str(dataset)
    if text in manifest_names():
        data = (resources.files("retrieval") / "data" / "manifests" / f"{text}.json").read_text("utf-8")
        return validate_manifest(json.loads(data), text)
    path = Path(text)
    if path.suffix == ".json" and path.is_file():
        return validate_manifest(json.loads(path.read_text("utf-8")), str(path))
    raise ValueError(f"unknown dataset {text!r}: expected one of {', '.join(manifest_names())} "
                     "or a manifest .json file.")


@dataclass
class CheckReport:
    """Result of :func:`check_files`: per fileset the expected and present counts, and the missing names."""

    dataset: str
    root: Path
    problems: list  # human-readable lines, empty when complete
    missing: dict  # fileset name -> list of missing relative paths (or a count shortfall message)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self, limit: int = 10) -> str:
        if self.ok:
            return f"{self.dataset}: complete under {self.root}."
        lines = [f"{self.dataset}: incomplete under {self.root}:"] + [f"  {p}" for p in self.problems[:limit]]
        if len(self.problems) > limit:
            lines.append(f"  ... and {len(self.problems) - limit} more")
        lines.append(f"  get it with: retrieval data download {self.dataset} --root {self.root}")
        return "\n".join(lines)


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_files(manifest: dict, root, *, filesets=None, verify_checksums: bool = False) -> CheckReport:
    """Compare ``root`` with the manifest: every listed file present (or the expected count), md5 on request.

    Parameters
    ----------
    manifest : dict
    root : path
        Dataset folder.
    filesets : iterable of str or None
        Names of the filesets to check (default: all).
    verify_checksums : bool
        Also compare the md5 of files listed in ``checksums``.
    """
    root = Path(root)
    problems, missing = [], {}
    for fs in manifest["filesets"]:
        if filesets is not None and fs["name"] not in filesets:
            continue
        folder = root / fs["folder"]
        names = fs.get("names")
        if names is not None:
            absent = [f"{fs['folder']}/{n}" for n in names if not (folder / n).is_file()]
            if absent:
                missing[fs["name"]] = absent
                problems.append(f"{fs['name']}: {len(absent)} of {len(names)} files missing under {folder} "
                                f"(first: {', '.join(absent[:3])})")
        else:
            count = fs["count"]
            pattern = fs.get("pattern", "*")
            have = sum(1 for p in folder.rglob(pattern) if p.is_file()) if folder.is_dir() else 0
            if have < count:
                missing[fs["name"]] = [f"{count - have} files"]
                problems.append(f"{fs['name']}: {have} of {count} files ({pattern}) under {folder}")
    if verify_checksums:
        for rel, md5 in (manifest.get("checksums") or {}).items():
            p = root / rel
            if p.is_file() and _md5(p) != md5:
                problems.append(f"{rel}: md5 differs from the official checksum {md5}")
    return CheckReport(dataset=manifest["dataset"], root=root, problems=problems, missing=missing)


def require_files(manifest: dict, root, **kwargs) -> None:
    """:func:`check_files`, raising ``FileNotFoundError`` with the full message when something is missing."""
    rep = check_files(manifest, root, **kwargs)
    if not rep.ok:
        raise FileNotFoundError(rep.message())


def fileset(manifest: dict, name: str) -> dict:
    """The fileset called ``name`` (``KeyError`` naming the available ones otherwise)."""
    for fs in manifest["filesets"]:
        if fs["name"] == name:
            return fs
    raise KeyError(f"manifest {manifest['dataset']} has no fileset {name!r} "
                   f"(has {', '.join(f['name'] for f in manifest['filesets'])}).")
