"""Thumbnails of indexed images, generated once and cached in the index folder.

``INDEX/thumbs/<content hash>-<side>.jpg``: keyed by the content hash of the catalog (a changed file gets a new
thumbnail, a moved one keeps it), written atomically. The EXIF orientation is applied (so boxes in original pixels
after EXIF rotation land where they belong); 16-bit gray is scaled by 255 / 65535 and 16-bit colour keeps its
high byte; CMYK goes through Pillow's CMYK -> RGB; transparency is composited onto white (as the features see it,
:mod:`retrieval.features.image`).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np

from retrieval.core.persistence import atomic_write

SIDES = {"small": 320, "large": 1024}
"""Thumbnail sizes by name: the longest side in pixels (the grid and the result list; the query and match views)."""


def to_display_rgb(im):
    """A Pillow image in any mode -> an 8-bit RGB image that looks like the original on screen."""
    from PIL import Image

    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(im, dtype=np.float64)
        if mode.startswith("I;16"):
            top = 65535.0
        elif mode == "F":
            top = 1.0 if arr.max(initial=0) <= 1.0 else 255.0
        else:   # 32-bit integer mode: Pillow opens 16-bit gray PNG / TIFF into it
            top = 65535.0 if arr.max(initial=0) > 255 else 255.0
        gray = np.clip(np.rint(arr * (255.0 / top)), 0, 255).astype(np.uint8)
        return Image.fromarray(gray, "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")   # CMYK, YCbCr, L, P, 1, RGB (16-bit RGB opens as 8-bit RGB)


def render_thumbnail(path, side: int, quality: int = 85) -> bytes:
    """JPEG bytes of the image at ``path``: EXIF orientation applied, display colours, longest side at most
    ``side`` (never enlarged)."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        if im.format == "JPEG" and im.mode in ("L", "RGB"):
            im.draft(im.mode, (side, side))   # decode at a reduced scale (never below the requested size)
        im = ImageOps.exif_transpose(im)
        rgb = to_display_rgb(im)
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
