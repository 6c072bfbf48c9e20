"""Uploaded images: received into a temporary file with a size limit, decoded and checked with the same guards as
the CLI (:func:`retrieval.features.load_image`: pixel count, smallest side, corrupt data) before anything is kept.

An image added to the index is then moved to ``INDEX/uploads/<its file name>`` (a folder the index owns and
follows, so a later ``retrieval index PHOTO_DIR`` keeps it): the name the client gave, reduced to its last part
(:func:`upload_name`: no folder, no control character, no leading dot), with the extension of its format when it
has another one, and `` (2)``, `` (3)``, ... before the extension when a file of that name is already there. A
query upload lives only in a temporary file for the duration of its search.

Every format of the index is recognised by its content (:mod:`retrieval.features.image_files`): a HEIC upload opens
from its temporary ``*.part`` file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from retrieval.engine.params import ParamError
from retrieval.features.image import (
    FORMAT_EXTENSIONS,
    IMAGE_EXTENSIONS,
    ImageReadError,
    LoadedImage,
    load_image,
    peek_image,
)
from retrieval.features.store import file_hash

UPLOADS = "uploads"
"""The folder of the index that holds the images added through the API."""

CHUNK = 1 << 20
MAX_NAME_BYTES = 200
"""The longest stored file name of an upload (UTF-8 bytes; file systems allow 255)."""
SAME_EXTENSION = {".jpeg": ".jpg", ".jpe": ".jpg", ".tiff": ".tif", ".heif": ".heic", ".pgm": ".ppm"}
"""Extensions that name the same format as the one :data:`FORMAT_EXTENSIONS` gives (an upload keeps its own)."""


class ApiError(Exception):
    """An error answered as ``{"error": message}`` with an HTTP ``status`` (and ``"field"``: the request's field
    refused, when one is)."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.field = field


def field_error(exc: ParamError) -> ApiError:
    """A refused search parameter (:class:`retrieval.engine.params.ParamError`) in the API's words: 400, naming
    the request's field (the API's search fields are named as :class:`~retrieval.engine.params.SearchParams`'s)."""
    return ApiError(400, exc.worded(lambda name: f"field {name!r} ="), field=exc.param)


@dataclass(eq=False)
class CheckedImage:
    """An uploaded image that decoded: its temporary file, format, size and content hash, and the working image
    it was decoded into (``loaded``: the features' gray image, :func:`retrieval.features.load_image`; a search
    or a match of the upload uses it instead of decoding the file again)."""

    path: Path
    format: str
    size: tuple[int, int]
    hash: str
    loaded: LoadedImage | None = None

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


def check_image(path, name: str, *, max_megapixels: float, min_side: int, max_side: int | None = 1024,
                upscale_to: int | None = None, reduce: str = "all") -> CheckedImage:
    """Decode the file at ``path`` (the upload called ``name``) with the CLI's guards into the features' working
    image (``max_side``, ``upscale_to`` and ``reduce``: the index's extractor's, so that it is decoded once);
    ApiError 415 for a file that is not an image (or a format the index does not read, refused from its header),
    413 for too many pixels (or a compressed chunk that decompresses past Pillow's limit), 400 for a corrupt or too
    small image. One line each (:func:`read_error`)."""
    what = f"upload {name!r}"
    try:
        with peek_image(path, name=name) as im:
            fmt = im.format
    except ImageReadError as exc:
        raise read_error(what, exc.reason) from None
    if fmt not in FORMAT_EXTENSIONS:
        raise ApiError(415, f"{what}: {fmt} images are not indexed; expected one of "
                            f"{', '.join(sorted(set(FORMAT_EXTENSIONS)))}.")
    try:
        img = load_image(path, max_side=max_side, max_megapixels=max_megapixels, min_side=min_side,
                         upscale_to=upscale_to, reduce=reduce, name=name)
    except ImageReadError as exc:
        raise read_error(what, exc.reason) from None
    return CheckedImage(Path(path), fmt, img.original_size, file_hash(path), img)


def upload_name(name: str | None, extension: str) -> str:
    """The file name an upload called ``name`` by the client is stored under (before collisions): its last part
    (after any ``/`` or ``\\``), NFC, without control or format characters (bidirectional overrides included),
    without leading dots and spaces, at most :data:`MAX_NAME_BYTES` bytes; it keeps its extension when that names
    the format ``extension`` names (``IMG_1.HEIC``), the extension of another image format is replaced by
    ``extension``, any other name gets ``extension`` appended; ``upload<extension>`` when nothing is left."""
    text = unicodedata.normalize("NFC", str(name or "")).replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(c for c in text if unicodedata.category(c)[0] != "C").strip().lstrip(". ").strip()
    stem, ext = os.path.splitext(text)
    if SAME_EXTENSION.get(ext.lower(), ext.lower()) != extension:
        if ext.lower() in IMAGE_EXTENSIONS:
            text = stem
        stem, ext = text, extension
    while stem and len((stem + ext).encode("utf-8")) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return (stem.rstrip() or "upload") + ext


def store_upload(checked: CheckedImage, folder, name: str | None = None) -> Path:
    """Move a checked upload to ``folder/<name>`` (:func:`upload_name`; `` (2)``, `` (3)``, ... before the
    extension when that name is taken; never replaces a file), on the same file system; returns the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = upload_name(name, checked.extension)
    stem, ext = os.path.splitext(wanted)
    for n in range(1, 10_000):
        final = folder / (wanted if n == 1 else f"{stem} ({n}){ext}")
        try:
            os.link(checked.path, final)   # fails when the name is taken: no file is ever replaced
        except FileExistsError:
            continue
        except OSError:   # a file system without hard links: claim the name, then move the file onto it
            try:
                os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                continue
            os.replace(checked.path, final)
            return final
        os.unlink(checked.path)
        return final
    raise ApiError(409, f"upload {name!r}: {folder} already holds 10,000 files of that name.")


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
