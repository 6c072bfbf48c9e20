"""Resumable, checksum-verified downloads and safe archive extraction for the dataset manifests.

- :func:`download_file`: HTTP(S) with ``Range`` resume. Bytes go to ``<dest>.part``; a new run asks for the rest
  (``Range: bytes=<size of .part>-``) and appends when the server answers 206 with the matching ``Content-Range``
  (otherwise it starts again). When complete, the size and the md5/sha256 given by the manifest are checked; a
  mismatch deletes the partial file and raises ``ValueError`` — nothing half-written is left under the final name,
  which appears only through an atomic rename.
- :func:`safe_extract`: tar (gz/bz2/xz) and zip. Every member is checked BEFORE anything is written: absolute
  paths, ``..`` components, links whose target leaves the folder, hard links to outside members and device/fifo
  members are refused with ``ValueError`` naming the member; extraction goes to a temporary folder inside the
  target and is moved into place only when complete. Tar extraction also uses Python's ``data`` filter.
- :func:`download_dataset`: every archive of a manifest, then :func:`retrieval.datasets.manifest.check_files`.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from retrieval.core.persistence import write_json_atomic
from retrieval.datasets.manifest import check_files, load_manifest

logger = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip")


class ChecksumError(ValueError):
    """A downloaded file's size or checksum differs from the manifest's."""


def file_digest(path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (read in 1 MiB blocks)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, *, size=None, md5=None, sha256=None, source: str = "") -> str:
    """Check size/md5/sha256 of ``path``; return its sha256. ``ChecksumError`` on mismatch."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != int(size):
        raise ChecksumError(f"{source or path}: size {actual_size} bytes, expected {size}.")
    if md5 is not None:
        got = file_digest(path, "md5")
        if got != md5.lower():
            raise ChecksumError(f"{source or path}: md5 {got} differs from the expected {md5} (corrupt download).")
    got256 = file_digest(path, "sha256")
    if sha256 is not None and got256 != sha256.lower():
        raise ChecksumError(f"{source or path}: sha256 {got256} differs from the expected {sha256} "
                            "(corrupt download).")
    return got256


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def download_file(url: str, dest, *, size=None, md5=None, sha256=None, timeout: float = 60.0,
                  chunk_size: int = 1 << 16, progress=None) -> Path:
    """Download ``url`` to ``dest`` (resuming ``dest.part``), verify it, then rename it into place.

    Parameters
    ----------
    url : str
    dest : path
    size, md5, sha256 : expected values or None (unchecked)
    timeout : float
        Socket timeout in seconds.
    progress : callable(done_bytes, total_bytes or 0) or None

    Returns
    -------
    Path
        ``dest``. An existing ``dest`` that passes the checks is kept without downloading.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        try:
            _verify(dest, size=size, md5=md5, sha256=sha256, source=str(dest))
            logger.info("%s already present and verified", dest)
            return dest
        except ChecksumError:
            logger.warning("%s exists but fails its checksum: downloading it again", dest)
            dest.unlink()
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    if size is not None and offset > int(size):
        part.unlink()
        offset = 0
    req = urllib.request.Request(url, headers={"User-Agent": "retrieval-downloader"})
    if offset and url.startswith(("http://", "https://")):
        req.add_header("Range", f"bytes={offset}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (URLs come from the manifests)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # the .part file is already complete
            resp = None
        else:
            raise OSError(f"download of {url} failed: HTTP {exc.code} {exc.reason}.") from None
    except urllib.error.URLError as exc:
        raise OSError(f"download of {url} failed: {exc.reason}.") from None
    except http.client.HTTPException as exc:
        raise OSError(f"download of {url} failed: {exc!r}.") from None
    if resp is not None:
        with resp:
            status = getattr(resp, "status", 200)
            mode = "ab"
            if offset and status == 206:
                m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != offset:
                    raise OSError(f"download of {url}: the server answered range "
                                  f"{resp.headers.get('Content-Range')!r} to a request from byte {offset}.")
                total = int(m.group(3)) if m.group(3) != "*" else 0
            else:
                if offset:
                    logger.info("%s: server ignored the range request; starting again", url)
                mode, offset = "wb", 0
                total = int(resp.headers.get("Content-Length") or 0)
            done = offset
            with open(part, mode) as fh:
                while True:
                    try:
                        block = resp.read(chunk_size)
                    except (OSError, ValueError, http.client.HTTPException) as exc:  # dropped: keep .part
                        fh.flush()
                        raise OSError(f"download of {url} interrupted after {done} bytes ({exc}); "
                                      "run the command again to resume.") from None
                    if not block:
                        break
                    fh.write(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, total)
                fh.flush()
                os.fsync(fh.fileno())
            if total and done < total:
                raise OSError(f"download of {url} interrupted after {done} of {total} bytes; "
                              "run the command again to resume.")
    try:
        _verify(part, size=size, md5=md5, sha256=sha256, source=url)
    except ChecksumError:
        part.unlink()
        raise
    os.replace(part, dest)
    return dest


def _is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _check_member_name(name: str, archive: str) -> str:
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        raise ValueError(f"{archive}: member {name!r} has an absolute path; refusing to extract.")
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{archive}: member {name!r} climbs out of the target folder ('..'); refusing to extract.")
    return "/".join(parts)


def _check_tar(tar: tarfile.TarFile, archive: str) -> list:
    names = set()
    members = tar.getmembers()
    for m in members:
        rel = _check_member_name(m.name, archive)
        if m.issym():
            target = m.linkname.replace("\\", "/")
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
            if target.startswith("/") or joined == ".." or joined.startswith("../"):
                raise ValueError(f"{archive}: symbolic link {m.name!r} -> {m.linkname!r} points outside the "
                                 "target folder; refusing to extract.")
        elif m.islnk():
            target = _check_member_name(m.linkname, archive)
            if target not in names:
                raise ValueError(f"{archive}: hard link {m.name!r} -> {m.linkname!r} does not point to an earlier "
                                 "member; refusing to extract.")
        elif not (m.isfile() or m.isdir()):
            raise ValueError(f"{archive}: member {m.name!r} is a device or fifo; refusing to extract.")
        names.add(rel)
    return members


def safe_extract(archive, target, *, flatten: bool = False) -> list:
    """Extract ``archive`` into ``target`` safely (see the module docstring); return the extracted relative paths.

    With ``flatten``, every regular file lands directly in ``target`` (sub-folders dropped; a name clash is an
    error), as revisitop does with the Oxford and Paris image archives.
    """
    archive, target = Path(archive), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=target))
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    _check_member_name(info.filename, archive.name)
                    mode = (info.external_attr >> 16) & 0o170000
                    if mode == 0o120000:
                        raise ValueError(f"{archive.name}: member {info.filename!r} is a symbolic link; refusing.")
                zf.extractall(tmp)
        else:
            try:
                tar = tarfile.open(archive)
            except tarfile.TarError as exc:
                raise ValueError(f"{archive}: not a readable tar archive ({exc}).") from None
            with tar:
                members = _check_tar(tar, archive.name)
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, members=members, filter="data")
                else:  # pragma: no cover (Python < 3.11.4)
                    tar.extractall(tmp, members=members)
        out = []
        files = sorted(p for p in tmp.rglob("*") if p.is_file() or p.is_symlink())
        if flatten:
            seen = {}
            for p in files:
                if p.is_symlink():
                    continue
                if p.name in seen:
                    raise ValueError(f"{archive.name}: {p.relative_to(tmp)} and {seen[p.name]} have the same name; "
                                     "cannot flatten.")
                seen[p.name] = p.relative_to(tmp)
            for name, rel in seen.items():
                os.replace(tmp / rel, target / name)
                out.append(name)
        else:
            for p in files:
                rel = p.relative_to(tmp)
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(p, target / rel)
                out.append(rel.as_posix())
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def download_dataset(dataset, root, *, base_url: str | None = None, keep_archives: bool = True,
                     timeout: float = 60.0, progress=None):
    """Download and unpack every archive of a dataset's manifest into ``root``; return the check report.

    Parameters
    ----------
    dataset : str or dict
        A bundled dataset name, a manifest path, or a manifest dict.
    root : path
        Dataset folder (archives go to ``root/downloads/``).
    base_url : str or None
        Fetch ``<base_url>/<filename>`` instead of the manifest URL (a mirror).
    keep_archives : bool
        Keep the downloaded archives (so that a re-run does not download again).
    progress : callable(filename, done_bytes, total_bytes) or None
    """
    manifest = dataset if isinstance(dataset, dict) else load_manifest(dataset)
    root = Path(root)
    archives = manifest.get("archives") or []
    if not archives:
        raise ValueError(f"{manifest['dataset']} cannot be downloaded automatically: "
                         f"{manifest.get('notes', 'no archive listed in its manifest')}")
    downloads = root / "downloads"
    record_path = root / ".retrieval-download.json"
    record = {}
    if record_path.is_file():
        with contextlib.suppress(ValueError, OSError):
            record = json.loads(record_path.read_text("utf-8"))
    for a in archives:
        url = a["url"] if base_url is None else f"{base_url.rstrip('/')}/{a['filename']}"
        cb = None if progress is None else (lambda d, t, _n=a["filename"]: progress(_n, d, t))
        path = download_file(url, downloads / a["filename"], size=a.get("size"), md5=a.get("md5"),
                             sha256=a.get("sha256"), timeout=timeout, progress=cb)
        digest = file_digest(path)
        into = root / a.get("into", ".")
        if _is_archive(a["filename"]):
            n = len(safe_extract(path, into, flatten=bool(a.get("flatten"))))
            logger.info("%s: %d files extracted into %s", a["filename"], n, into)
            if not keep_archives:
                path.unlink()
        else:
            into.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, into / a["filename"])
        record[a["filename"]] = {"url": url, "sha256": digest}
        write_json_atomic(record_path, record)
    return check_files(manifest, root)
