"""A photo's original file as the server sends it, and what the page's information panel says about it.

The original is always named by its catalog id (``GET /api/images/{id}/original``), never by a path of the request:
the file of that catalog row is sent as it is, with its content type (from its extension, the one list of
:data:`CONTENT_TYPES`; a HEIC file is ``image/heic``, a DNG ``image/x-adobe-dng``) and its own file name in ``Content-Disposition``
(:func:`content_disposition`: an ASCII ``filename`` for old clients and the exact UTF-8 name in ``filename*``,
RFC 6266 and RFC 8187).
"""

from __future__ import annotations

import os
import unicodedata
from urllib.parse import quote

CONTENT_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".jpe": "image/jpeg", ".png": "image/png",
                 ".tif": "image/tiff", ".tiff": "image/tiff", ".webp": "image/webp", ".bmp": "image/bmp",
                 ".ppm": "image/x-portable-pixmap", ".pgm": "image/x-portable-graymap", ".gif": "image/gif",
                 ".heic": "image/heic", ".heif": "image/heif", ".avif": "image/avif",
                 ".dng": "image/x-adobe-dng", ".cr2": "image/x-canon-cr2", ".cr3": "image/x-canon-cr3",
                 ".nef": "image/x-nikon-nef", ".arw": "image/x-sony-arw", ".raf": "image/x-fuji-raf",
                 ".orf": "image/x-olympus-orf", ".rw2": "image/x-panasonic-rw2"}
"""Content type of an original by its extension (lower case; camera RAW files: the freedesktop.org shared MIME
types); any other: ``application/octet-stream``."""

ORIENTATIONS = {1: "normal", 2: "mirrored horizontally", 3: "rotated 180°", 4: "mirrored vertically",
                5: "mirrored horizontally, rotated 90° counter-clockwise", 6: "rotated 90° clockwise",
                7: "mirrored horizontally, rotated 90° clockwise", 8: "rotated 90° counter-clockwise"}
"""What the EXIF ``Orientation`` tag asks of a viewer (the index applies it: sizes and boxes are as displayed)."""


def content_type(path) -> str:
    return CONTENT_TYPES.get(os.path.splitext(str(path))[1].lower(), "application/octet-stream")


def ascii_name(name: str) -> str:
    """``name`` for the plain ``filename`` parameter: accents removed (NFKD), other non-ASCII characters, quotes,
    backslashes and control characters replaced by ``_``."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return "".join(c if " " <= c < "\x7f" and c not in '"\\' else "_" for c in plain) or "photo"


def content_disposition(name: str, *, attachment: bool) -> str:
    """The ``Content-Disposition`` header of a file called ``name``: ``attachment`` (a download) or ``inline``, with
    ``filename="<ascii_name>"`` and, when that differs from the name, ``filename*=UTF-8''<percent-encoded name>``."""
    kind = "attachment" if attachment else "inline"
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C") or "photo"
    plain = ascii_name(name)
    header = f'{kind}; filename="{plain}"'
    if plain != name:
        header += f"; filename*=UTF-8''{quote(name, safe='')}"
    return header


def orientation_text(tag) -> str:
    """``6 (rotated 90° clockwise)``; ``1 (normal)`` when the tag is absent."""
    tag = int(tag or 1)
    return f"{tag} ({ORIENTATIONS.get(tag, 'unknown value')})"


def photo_record(row: dict, facts: dict, folder: str | None) -> dict:
    """The information panel of a photo (``GET /api/images/{id}/facts``): its catalog ``row`` (size after EXIF
    orientation, features, content hash), its header ``facts`` (:func:`retrieval.app.photo_facts.photo_facts`:
    date, camera, format, file size now) and its ``folder`` on the page (:mod:`retrieval.web.folders`)."""
    name = os.path.basename(row["path"])
    return {"id": int(row["id"]), "path": row["path"], "name": name, "folder": folder,
            "width": row["width"], "height": row["height"],
            "megapixels": round(row["width"] * row["height"] / 1e6, 1) if row["width"] and row["height"] else None,
            "bytes": facts.get("bytes") if facts.get("bytes") is not None else row["size"],
            "format": facts.get("format"), "content_type": content_type(row["path"]),
            "date": facts.get("date"), "camera": facts.get("camera"), "modified": facts.get("mtime"),
            "orientation": int(row.get("orientation") or 1),
            "orientation_text": orientation_text(row.get("orientation")),
            "n_features": row["n_features"], "hash": row["hash"], "error": facts.get("error")}
