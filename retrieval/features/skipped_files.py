"""Why a folder walk leaves a file out: :func:`skip_reason` names the files :func:`retrieval.features.image.is_image_name`
refuses as "not an image" or "unsupported", what a sync's summary counts (``3 skipped: 2 not images (.txt),
1 unsupported (.xyz)``)."""

from __future__ import annotations

import functools
import os

__all__ = ["SIDECAR_EXTENSIONS", "SKIP_REASONS", "skip_reason"]

SIDECAR_EXTENSIONS = (".xmp", ".aae", ".pp3", ".dop", ".cos", ".arp", ".on1", ".lrv", ".thm", ".db", ".ds_store",
                      ".ini", ".lnk", ".url")
"""Files that travel with photos but are not photos (lower case): editors' sidecars (XMP, Apple's AAE, RawTherapee,
DxO, Capture One, ACDSee, ON1), cameras' low-resolution video and thumbnail companions (LRV, THM), folder databases
and shortcuts (``Thumbs.db``, ``desktop.ini``). :func:`skip_reason` calls them ``"not an image"``."""

SKIP_REASONS = ("not an image", "unsupported")
"""Why a folder walk leaves a file out (:func:`skip_reason`)."""

@functools.cache
def _standard_types():
    import mimetypes

    return mimetypes.MimeTypes()   # Python's table only (the machine's files are not read into an instance)


def skip_reason(name) -> str:
    """Why a file whose name :func:`is_image_name` refuses is left out of a folder walk: ``"not an image"`` for a
    file of another kind (its extension's standard MIME type is not ``image/*``: text, documents, video, sound,
    archives; or one of :data:`SIDECAR_EXTENSIONS`), ``"unsupported"`` for anything else (an image in a format the
    library does not read, such as PSD or SVG, a RAW format it does not list, an unknown extension). The MIME types are
    Python's own table (:class:`mimetypes.MimeTypes`), not the machine's: the same answer everywhere."""
    base = os.path.basename(os.fspath(name)).lower()
    ext = os.path.splitext(base)[1]
    if ext in SIDECAR_EXTENSIONS or base in SIDECAR_EXTENSIONS:
        return "not an image"
    kind = _standard_types().guess_type("x" + ext, strict=False)[0] if ext else None
    return "not an image" if kind is not None and not kind.startswith("image/") else "unsupported"
