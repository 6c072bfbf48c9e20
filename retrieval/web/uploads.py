"""Uploaded images: received into a temporary file with a size limit, decoded and checked with the same guards as
the CLI (:func:`retrieval.features.load_image`: pixel count, smallest side, corrupt data) before anything is kept.

An image added to the index is then moved to ``INDEX/uploads/<content hash><extension>`` (a folder the index owns and
follows, so a later ``retrieval index PHOTO_DIR`` keeps it); a query upload lives only in a temporary file for the
duration of its search.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from retrieval.features.image import FORMAT_EXTENSIONS, ImageReadError, load_image, register_image_plugins
from retrieval.features.store import file_hash

UPLOADS = "uploads"
"""The folder of the index that holds the images added through the API."""

CHUNK = 1 << 20


class ApiError(Exception):
    """An error answered as ``{"error": message}`` with an HTTP ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = int(status)
        self.message = message


@dataclass
class CheckedImage:
    """An uploaded image that decoded: its temporary file, format, size and content hash."""

    path: Path
    format: str
    size: tuple[int, int]
    hash: str

    @property
    def extension(self) -> str:
        return FORMAT_EXTENSIONS[self.format]


async def receive(upload, folder, max_bytes: int, in_flight: set | None = None) -> Path:
    """Copy an uploaded file (a Starlette ``UploadFile``) into a new temporary file in ``folder``; ApiError 413
    (nothing kept) when it is larger than ``max_bytes``, 400 when it is empty. ``in_flight``: the set of uploads
    being received (:func:`clean_incoming` leaves them alone); the caller removes the path when done with it."""
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".upload-", suffix=".part", dir=folder)
    if in_flight is not None:
        in_flight.add(tmp)
    total = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            while True:
                block = await upload.read(CHUNK)
                if not block:
                    break
                total += len(block)
                if total > max_bytes:
                    raise ApiError(413, f"upload {upload.filename!r} is larger than the limit of "
                                        f"{max_bytes / 1e6:g} MB (--max-upload-mb).")
                fh.write(block)
        if total == 0:
            raise ApiError(400, f"upload {upload.filename!r} is empty (0 bytes).")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if in_flight is not None:
            in_flight.discard(tmp)
        raise
    return Path(tmp)


def read_error(what: str, reason: str) -> ApiError:
    """The answer to an image that cannot be read: 415 not an image, 413 too large, 400 otherwise."""
    status = 415 if reason.startswith("not an image") else 413 if reason.startswith("too large") else 400
    return ApiError(status, f"{what}: {reason}.")


def check_image(path, name: str, *, max_megapixels: float, min_side: int) -> CheckedImage:
    """Decode the file at ``path`` (the upload called ``name``) with the CLI's guards; ApiError 415 for a file that is
    not an image (or a format the index does not read), 413 for too many pixels, 400 for a corrupt or too small
    image."""
    from PIL import Image

    try:
        img = load_image(path, max_side=1024, max_megapixels=max_megapixels, min_side=min_side)
    except ImageReadError as exc:
        raise read_error(f"upload {name!r}", exc.reason) from None
    register_image_plugins(path)
    with Image.open(path) as im:
        fmt = im.format
    if fmt not in FORMAT_EXTENSIONS:
        raise ApiError(415, f"upload {name!r}: {fmt} images are not indexed; expected one of "
                            f"{', '.join(sorted(set(FORMAT_EXTENSIONS)))}.")
    return CheckedImage(Path(path), fmt, img.original_size, file_hash(path))


def store_upload(checked: CheckedImage, folder) -> Path:
    """Move a checked upload to ``folder/<hash><extension>`` (same file system: a rename); returns the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{checked.hash}{checked.extension}"
    os.replace(checked.path, final)
    return final


INCOMING = ".incoming"
"""The folder of ``uploads/`` that receives uploads being added (``*.part`` files while they arrive)."""


def clean_incoming(uploads, in_flight=()) -> int:
    """Remove the ``*.part`` files of interrupted uploads under ``uploads/.incoming`` (not those ``in_flight``);
    returns how many."""
    folder = Path(uploads) / INCOMING
    n = 0
    keep = {str(p) for p in (in_flight.copy() if isinstance(in_flight, set) else in_flight)}
    if folder.is_dir():
        for p in folder.glob("*.part"):
            if str(p) in keep:
                continue
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
    return n


def discard(path) -> None:
    with contextlib.suppress(FileNotFoundError, TypeError):
        os.unlink(path)
