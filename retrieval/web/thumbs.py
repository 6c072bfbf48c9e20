"""Thumbnails of indexed images, generated once and cached in the index folder.

``INDEX/thumbs/<content hash>-<side>.jpg``: keyed by the content hash of the catalog (a changed file gets a new
thumbnail, a moved one keeps it), written atomically. Photos are opened as the index opens them
(:mod:`retrieval.features.image_files`: every format of the index, HEIC and AVIF included, recognised by content),
decoded at the size needed (:func:`retrieval.features.image.load_display`).
The EXIF orientation is applied (so boxes in original pixels after EXIF rotation land where they belong); 16-bit
gray is scaled by 255 / 65535 and 16-bit colour keeps its high byte; CMYK goes through Pillow's CMYK -> RGB;
transparency is composited onto white (as the features see it).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from retrieval.core.persistence import atomic_write
from retrieval.features.image import load_display

SIDES = {"small": 320, "large": 1024}
"""Thumbnail sizes by name: the longest side in pixels (the grid and the result list; the query and match views)."""


THUMBNAIL_MAX_MEGAPIXELS = 1000.0
"""The pixel guard of a thumbnail's decode: any photo the index holds (its memory is bounded by the server's decode
budget, reserved before, :mod:`retrieval.web.budget`)."""


def render_thumbnail(path, side: int, quality: int = 85) -> bytes:
    """JPEG bytes of the image at ``path``: decoded for a picture of ``side`` pixels
    (:func:`retrieval.features.image.load_display`: any format of the index, HEIC included, recognised by content;
    a JPEG decoded reduced by its decoder, any other format box-averaged band by band as it is converted, so that
    it costs no more memory than its features' decode, :func:`~retrieval.features.image.display_cost`), EXIF
    orientation applied, display colours, longest side at most ``side`` (never enlarged; Lanczos). Raises
    ImageReadError (a ValueError) when the file cannot be read."""
    from PIL import Image

    rgb = load_display(path, side, max_megapixels=THUMBNAIL_MAX_MEGAPIXELS)
    rgb.thumbnail((side, side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class SourceUnreadable(OSError):
    """The image a thumbnail is made of cannot be read (gone, unreadable, not an image): ``path`` and ``reason``."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


class ThumbnailCache:
    """Thumbnails in ``folder`` (created on first use), keyed by content hash and side."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def path_for(self, content_hash: str, side: int) -> Path:
        if not content_hash or not all(c.isalnum() for c in content_hash):
            raise ValueError(f"content hash {content_hash!r}: expected letters and digits only.")
        return self.folder / f"{content_hash}-{int(side)}.jpg"

    def get(self, image_path, content_hash: str, side: int, decoding=contextlib.nullcontext) -> Path:
        """The cached thumbnail file (generated from ``image_path`` when missing, inside ``decoding()``: the
        server's decode budget). Raises :class:`SourceUnreadable` when the image cannot be read, OSError when the
        thumbnail cannot be written (a full disk)."""
        out = self.path_for(content_hash, side)
        if out.exists():
            return out
        if not os.path.isfile(image_path):
            raise SourceUnreadable(image_path, "the file is gone")
        with decoding():
            try:
                data = render_thumbnail(image_path, side)
            except (OSError, SyntaxError, ValueError) as exc:   # PIL's UnidentifiedImageError is an OSError
                raise SourceUnreadable(image_path, f"{type(exc).__name__}: {exc}") from None
        os.makedirs(self.folder, exist_ok=True)
        with atomic_write(out) as fh:
            fh.write(data)
        return out
