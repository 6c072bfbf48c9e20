"""The same photograph, or another shot of the same scene? The evidence behind ``retrieval duplicates``' **near**
kind, and the quarter turns that let upright features match a photo rotated by 90, 180 or 270 degrees.

A verified pair (:class:`retrieval.rerank.verifier.Verifier`) only says that two photos show the same thing. Two
shots from nearly the same place verify as strongly as a photo and its resized copy. What only a copy of one
photograph has: its whole frame is a *similarity* of the other's (a resize, a crop, a quarter turn; no perspective,
no parallax) and its interest points are the same points. :func:`same_photograph` asks exactly that of the inliers:

1. the least-squares similarity ``z_b = c z_a + t`` (complex numbers: ``|c|`` the scale, ``arg c`` the rotation),
   refitted twice on the inliers it maps within :data:`REFIT_PIXELS`;
2. its rotation within :data:`MAX_ANGLE_DEVIATION` degrees of a multiple of 90 (two shots from a hand-held camera
   differ by a fraction of a degree more than that; a copy by none), or within three standard errors of the
   fitted angle when few inliers leave it uncertain (a thumbnail with a dozen features);
3. the inliers where the similarity puts them: median distance at most :data:`MAX_RESIDUAL` pixels of the smaller
   photo;
4. one frame inside the other (a crop, or the same frame): the overlap covers :data:`MIN_CONTAINED` of the smaller
   frame;
5. *repeatability*: of the interest points of the photo with fewer of them inside the overlap, the share that the
   similarity maps within :data:`REPEAT_PIXELS` pixels (of the smaller photo) of a point of the other at the same
   scale (within 25 %), whatever their descriptors: :data:`MIN_REPEATABILITY` or more. Parallax and another pose
   move points by more than a pixel; a re-encoding, a resize or a crop does not.

Then the pixels (:func:`block_agreement`, in :mod:`retrieval.app.duplicates`): the two photos decoded reduced to
256 pixels, the overlap cut into blocks, and at least :data:`MIN_AGREEMENT` of its textured blocks must agree
(grey levels correlated at 0.8, which no change of brightness or contrast alters; samples clipped in either photo,
burnt-out highlights of a brightened copy, left out): a copy agrees everywhere, a second shot of a distant view
(where zooming is a similarity too) disagrees where clouds, water or people moved.

The thresholds come from a labelled set of real photos (:mod:`retrieval.bench.duplicate_set`: 655 edited copies
against 477 verified pairs of other shots of UKBench objects and Holidays scenes, docs/results.md "Duplicates").

Quarter turns (:func:`turned`): the presets' Hessian-affine features are upright (the gravity assumption), so a
photo turned by 90 degrees matches nothing. Turning an image by 90 degrees turns each upright patch by 90 degrees
about its centre; the SIFT descriptor of the turned patch is the original one with its 4 x 4 grid of cells turned
and its 8 orientation bins shifted by two, and its frame is ``A R`` (``R`` the quarter turn). So the features of a
turned photo are obtained without decoding it again: exact for round regions, approximate for elongated ones
(enough: a copy keeps hundreds of matches; docs/differences.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.features.types import LocalFeatures

MAX_ANGLE_DEVIATION = 0.3
"""Degrees between the similarity's rotation and the nearest multiple of 90 (copies: at most 0.13 on the labelled
set; other shots verified with a rotation this close to a multiple of 90 are left to repeatability)."""

MIN_CONTAINED = 0.85
"""Share of the smaller frame inside the other's, mapped by the similarity (a crop or the same frame)."""

REPEAT_PIXELS = 1.0
"""Distance (pixels of the smaller photo) within which a mapped interest point repeats."""

MIN_REPEATABILITY = 0.5
"""Share of repeated interest points for the same photograph (labelled copies: 95 % above 0.59; other shots that
passed every other test: a zoomed second shot of a distant valley, 0.42)."""

MAX_RESIDUAL = 0.45
"""Median distance (pixels of the smaller photo) between the inliers and their place under the similarity: a copy's
points are where the similarity puts them (98 % of the labelled copies within 0.37), another shot's are moved by
perspective and parallax (the nearest other shots on the labelled set: 0.56 and more)."""

REFIT_PIXELS = 3.0
"""Inliers kept for the similarity's refits: within this many pixels of the smaller photo."""

SIFT_TURN = {"hesaff": (1, 6)}
"""Per detector with a 4 x 4 x 8 SIFT layout: ``(grid turn, orientation shift)`` of one counter-clockwise quarter
turn of the image (``numpy.rot90`` of the cell grid, ``numpy.roll`` of the orientation bins), measured on real
photos against features extracted from the turned pixels."""


def can_turn(features: LocalFeatures) -> bool:
    """Whether :func:`turned` applies: 128-d SIFT descriptors of a detector in :data:`SIFT_TURN`."""
    cfg = features.config or {}
    return cfg.get("detector") in SIFT_TURN and features.descriptors.ndim == 2 and features.descriptors.shape[1] == 128


def turned(features: LocalFeatures, quarter_turns: int) -> LocalFeatures:
    """The features of the photo turned by ``quarter_turns`` x 90 degrees counter-clockwise, in the pixels of the
    photo as it is (module docstring): descriptors permuted, frames ``A R``; positions and image size unchanged, so
    a transform found with them maps the unturned photo onto the other."""
    k = int(quarter_turns) % 4
    if k == 0 or len(features) == 0:
        return features
    grid_turn, shift = SIFT_TURN[features.config["detector"]]
    D = np.asarray(features.descriptors).reshape(-1, 4, 4, 8)
    A = np.asarray(features.frames, np.float32)[:, 2:].reshape(-1, 2, 2)
    R = np.array([[0.0, -1.0], [1.0, 0.0]], np.float32)
    for _ in range(k):
        D = np.roll(np.rot90(D, grid_turn, axes=(1, 2)), shift, axis=3)
        A = A @ R
    frames = np.c_[np.asarray(features.frames, np.float32)[:, :2], A.reshape(-1, 4)]
    return LocalFeatures(frames=np.ascontiguousarray(frames, np.float32),
                         descriptors=np.ascontiguousarray(D.reshape(-1, 128)), image_size=features.image_size,
                         config=features.config)


@dataclass(frozen=True)
class NearEvidence:
    """What :func:`same_photograph` measured: ``near`` (all tests passed), the similarity's ``scale`` and ``angle``
    (degrees), ``deviation`` from the nearest multiple of 90, ``contained`` and ``repeatability``."""

    near: bool
    scale: float
    angle: float
    deviation: float
    contained: float
    repeatability: float
    residual: float = float("inf")
    similarity: tuple = (0.0, 0.0, 0.0, 0.0)     # (a, b, tx, ty): x' = a x - b y + tx, y' = b x + a y + ty
    agreement: float | None = None              # block_agreement of the pixels, when measured

    def to_json(self) -> dict:
        return {"near": self.near, "scale": round(self.scale, 4), "angle": round(self.angle, 3),
                "deviation": round(self.deviation, 3), "contained": round(self.contained, 3),
                "repeatability": round(self.repeatability, 3), "residual": round(min(self.residual, 1e6), 3),
                "agreement": None if self.agreement is None else round(self.agreement, 3)}


NOT_NEAR = NearEvidence(False, 0.0, 0.0, 180.0, 0.0, 0.0)


def _complex(points) -> np.ndarray:
    p = np.asarray(points, np.float64)
    return p[:, 0] + 1j * p[:, 1]


def similarity_fit(za: np.ndarray, zb: np.ndarray) -> tuple[complex, complex]:
    """Least-squares ``(c, t)`` with ``zb ~ c za + t`` (complex points: a similarity without reflection)."""
    ma, mb = za.mean(), zb.mean()
    a, b = za - ma, zb - mb
    c = complex(np.vdot(a, b) / max(float(np.vdot(a, a).real), 1e-12))
    return c, mb - c * ma


def _scales(frames) -> np.ndarray:
    f = np.asarray(frames, np.float64)
    return np.sqrt(np.abs(f[:, 2] * f[:, 5] - f[:, 3] * f[:, 4])) + 1e-12


def same_photograph(features_a: LocalFeatures, features_b: LocalFeatures, inlier_pairs) -> NearEvidence:
    """Whether verified inliers (``(m, 2)``: index in ``features_a``, index in ``features_b``) say that B is a
    resized, re-encoded, cropped or quarter-turned copy of A or A of B (module docstring)."""
    from scipy.spatial import cKDTree

    pairs = np.asarray(inlier_pairs, np.int64).reshape(-1, 2)
    if len(pairs) < 3:
        return NOT_NEAR
    za, zb = _complex(features_a.frames[pairs[:, 0], :2]), _complex(features_b.frames[pairs[:, 1], :2])
    c, t = similarity_fit(za, zb)
    for _ in range(2):
        small = REFIT_PIXELS * max(1.0, abs(c))        # pixels of B for REFIT_PIXELS pixels of the smaller photo
        keep = np.abs(c * za + t - zb) <= small
        if keep.sum() < 3:
            return NOT_NEAR
        c, t = similarity_fit(za[keep], zb[keep])
    scale, angle = abs(c), float(np.degrees(np.angle(c)))
    deviation = abs((angle + 45.0) % 90.0 - 45.0)
    a = za[keep] - za[keep].mean()
    residual = np.abs(c * za[keep] + t - zb[keep])
    sigma = float(np.degrees(np.sqrt(np.mean(residual ** 2) / max(float(np.sum(np.abs(c * a) ** 2)), 1e-12))))
    tolerance = max(MAX_ANGLE_DEVIATION, min(3.0 * sigma, 2.0))
    median_residual = float(np.median(residual)) / max(1.0, scale)     # pixels of the smaller photo
    (wa, ha), (wb, hb) = features_a.image_size, features_b.image_size
    corners = c * _complex([[0, 0], [wa, 0], [wa, ha], [0, ha]]) + t
    x0, x1 = max(corners.real.min(), 0.0), min(corners.real.max(), float(wb))
    y0, y1 = max(corners.imag.min(), 0.0), min(corners.imag.max(), float(hb))
    overlap = max(x1 - x0, 0.0) * max(y1 - y0, 0.0)
    contained = overlap / max(min(scale * scale * wa * ha, float(wb * hb)), 1e-9)
    mapped = c * _complex(features_a.frames[:, :2]) + t
    in_a = (mapped.real >= x0) & (mapped.real <= x1) & (mapped.imag >= y0) & (mapped.imag <= y1)
    fb = np.asarray(features_b.frames, np.float64)
    in_b = (fb[:, 0] >= x0) & (fb[:, 0] <= x1) & (fb[:, 1] >= y0) & (fb[:, 1] <= y1)
    pa = np.c_[mapped.real[in_a], mapped.imag[in_a]]
    sa = _scales(features_a.frames[in_a]) * scale
    pb, sb = fb[in_b, :2], _scales(fb[in_b])
    if len(pa) == 0 or len(pb) == 0:
        return NearEvidence(False, scale, angle, deviation, contained, 0.0, median_residual,
                            (c.real, c.imag, t.real, t.imag))
    radius = REPEAT_PIXELS * max(1.0, scale)
    if len(pa) <= len(pb):
        d, j = cKDTree(pb).query(pa)
        repeated = (d <= radius) & (np.abs(np.log(sa / sb[j])) < np.log(1.25))
    else:
        d, j = cKDTree(pa).query(pb)
        repeated = (d <= radius) & (np.abs(np.log(sb / sa[j])) < np.log(1.25))
    repeatability = float(repeated.mean())
    near = bool(deviation <= tolerance and median_residual <= MAX_RESIDUAL and contained >= MIN_CONTAINED
                and repeatability >= MIN_REPEATABILITY)
    return NearEvidence(near, scale, angle, deviation, contained, repeatability, median_residual,
                        (c.real, c.imag, t.real, t.imag))


PIXEL_SIDE = 256
"""Longest side (pixels) at which two photos' pixels are compared (:func:`pixels_agree`)."""

MIN_AGREEMENT = 0.8
"""Share of the overlap's textured blocks whose grey levels agree (:func:`block_agreement`) for the same
photograph: the labelled copies 0.87 and more (99 % above 0.95), a zoomed second shot of a mountain under moving
clouds 0.65 (docs/results.md, "Duplicates")."""


def grey_thumbnail(path, side: int = PIXEL_SIDE):
    """``(grey float32 (h, w), (sx, sy))``: the photo (EXIF orientation applied) reduced to ``side`` pixels at most
    (a JPEG decoded reduced, by draft mode), and the factors from its full-size pixels to the thumbnail's."""
    from PIL import Image, ImageOps

    from retrieval.features.image import opened

    with opened(path) as im:
        w0, h0 = im.size
        if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
            w0, h0 = h0, w0
        im.draft("L", (side, side))
        g = ImageOps.exif_transpose(im).convert("L")
        g.thumbnail((side, side), Image.BILINEAR)
        return np.asarray(g, np.float32), (g.width / w0, g.height / h0)


def _bilinear(img: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    h, w = img.shape
    x = np.clip(x, 0, w - 1.001)
    y = np.clip(y, 0, h - 1.001)
    x0, y0 = np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)
    fx, fy = x - x0, y - y0
    return ((1 - fx) * (1 - fy) * img[y0, x0] + fx * (1 - fy) * img[y0, x0 + 1]
            + (1 - fx) * fy * img[y0 + 1, x0] + fx * fy * img[y0 + 1, x0 + 1])


CLIPPED = (5.0, 250.0)
"""Grey levels (0-255) at or below the first, or at or above the second, are clipped: burnt-out highlights or
crushed shadows, where an edit of the brightness or contrast has erased the picture (:func:`block_agreement`)."""


def block_agreement(thumb_a, thumb_b, size_a, size_b, similarity, n: int = 64, block: int = 8) -> float:
    """Share of the overlap's textured blocks (``block`` x ``block`` samples of an ``n`` x ``n`` grid over A's
    frame mapped into B) whose grey levels correlate at 0.8 or more: a copy agrees everywhere, another moment of the
    same view disagrees where something moved or the light changed (sky, water, people).

    A correlation does not change with the brightness or the contrast; a sample clipped in either photo
    (:data:`CLIPPED`) is left out, and a block left with fewer than half its samples says nothing: a brightened copy
    whose highlights burnt out agrees where its picture is left, instead of disagreeing wherever it turned white."""
    (ga, (sxa, sya)), (gb, (sxb, syb)) = thumb_a, thumb_b
    a, b, tx, ty = similarity
    (wa, ha), (wb, hb) = size_a, size_b
    xs, ys = np.meshgrid(np.linspace(0.5, wa - 0.5, n), np.linspace(0.5, ha - 0.5, n))
    xb, yb = a * xs - b * ys + tx, b * xs + a * ys + ty
    inside = (xb >= 0) & (xb <= wb - 1) & (yb >= 0) & (yb <= hb - 1)
    va = _bilinear(ga, xs * sxa, ys * sya)
    vb = _bilinear(gb, xb * sxb, yb * syb)
    lo, hi = CLIPPED
    unclipped = (va > lo) & (va < hi) & (vb > lo) & (vb < hi)
    good = total = 0
    for i in range(0, n, block):
        for j in range(0, n, block):
            m = inside[i:i + block, j:j + block]
            if m.mean() < 0.9:
                continue
            m = m & unclipped[i:i + block, j:j + block]
            if 2 * m.sum() < m.size:          # mostly clipped: nothing left to compare
                continue
            pa, pb = va[i:i + block, j:j + block][m], vb[i:i + block, j:j + block][m]
            pa, pb = pa - pa.mean(), pb - pb.mean()
            if pa.std() < 4.0 and pb.std() < 4.0:        # flat in both: says nothing
                continue
            total += 1
            d = float(np.sqrt((pa * pa).sum() * (pb * pb).sum()))
            good += d > 0 and float((pa * pb).sum()) / d >= 0.8
    return good / total if total else 1.0
