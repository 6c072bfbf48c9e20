"""Detectors: frame conventions checked against known geometry (synthetic ellipse, 90-degree rotation, grid)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_path
from scipy.spatial import cKDTree

from retrieval.features import FeatureExtractor, LoadedImage, available_detectors, extract_features
from retrieval.features.detectors import frames_from_ellipse_cholesky
from retrieval.features.extractor import frames_to_original


def _ellipse_image(theta_deg, cx=200.0, cy=150.0, s_major=12.0, s_minor=6.0):
    h, w = 300, 400
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    th = np.deg2rad(theta_deg)
    R = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    Si = np.linalg.inv(R @ np.diag([s_major**2, s_minor**2]) @ R.T)
    d = np.stack([xx - cx, yy - cy], -1)
    q = np.einsum("...i,ij,...j->...", d, Si, d)
    return (255 * (1 - 0.8 * np.exp(-0.5 * q))).astype(np.uint8)


@pytest.mark.parametrize("theta", [0.0, 30.0, 90.0, 135.0])
def test_hesaff_frame_is_the_blob_ellipse(theta):
    """A dark anisotropic Gaussian blob at (200, 150): the frame's centre is the blob's (pixel-centre convention),
    and the ellipse A A^T has its major axis along the blob's, in image axes (x right, y down)."""
    f = extract_features(LoadedImage.from_array(_ellipse_image(theta)), "hesaff", threshold=1.0)
    i = np.argmin(np.hypot(f.frames[:, 0] - 200, f.frames[:, 1] - 150))
    fr = f.frames[i].astype(np.float64)
    assert abs(fr[0] - 200) < 0.5 and abs(fr[1] - 150) < 0.5
    A = fr[2:].reshape(2, 2)
    ev, evec = np.linalg.eigh(A @ A.T)
    major = np.rad2deg(np.arctan2(evec[1, 1], evec[0, 1])) % 180
    assert min(abs(major - theta % 180), 180 - abs(major - theta % 180)) < 3
    assert np.sqrt(ev[1] / ev[0]) > 1.3  # elongated (affine adaptation on)


def test_cholesky_orientation_formula():
    """A = L R(ori) computed by hand for one frame."""
    fr = frames_from_ellipse_cholesky([1.0], [2.0], [3.0], [0.5], [2.0], [np.pi / 2])[0]
    L = np.array([[3.0, 0], [0.5, 2.0]])
    R = np.array([[0.0, -1.0], [1.0, 0.0]])
    np.testing.assert_allclose(fr, [1, 2, *(L @ R).ravel()], atol=1e-6)


def _crop(path):
    import cv2

    return cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)[100:400, 100:500].copy()


@pytest.mark.parametrize("detector", ["hesaff", "sift"])
def test_rotation_invariant_frames_rotate_with_the_image(detector):
    """Rotate the image by 90 degrees clockwise: with rotation invariance on, frames at corresponding positions
    satisfy A_rot = M A with M the rotation (this fixes the orientation sign convention)."""
    img = _crop(shared_path("opencv_samples", "graf1.png"))
    h = img.shape[0]
    rot = np.ascontiguousarray(np.rot90(img, k=-1))
    ex = FeatureExtractor(detector, max_side=None, rotation_invariance=True)
    f1, f2 = ex(img), ex(rot)
    M = np.array([[0.0, -1.0], [1.0, 0.0]])
    p1 = f1.xy.astype(np.float64) @ M.T + [h - 1, 0]
    tree = cKDTree(f2.xy)
    ok = wrong = n = 0
    for i, pts in enumerate(tree.query_ball_point(p1, r=1.0)):
        if not pts:
            continue
        A = f1.frames[i, 2:].reshape(2, 2)
        cands = [f2.frames[j, 2:].reshape(2, 2) for j in pts]
        n += 1
        ok += min(np.abs(M @ A - B).max() / np.abs(B).max() for B in cands) < 0.15
        wrong += min(np.abs(M.T @ A - B).max() / np.abs(B).max() for B in cands) < 0.15  # opposite sign
    assert n > 50
    assert ok / n > 0.6 and wrong / n < 0.2, (ok, wrong, n)


def test_upright_hesaff_has_no_rotation():
    f = extract_features(LoadedImage.from_array(_ellipse_image(30)), "hesaff", threshold=1.0)
    assert np.all(f.frames[:, 3] == 0)  # a12 = 0: lower-triangular shape, orientation 0


def test_dense_grid():
    img = (np.random.default_rng(0).random((100, 120)) * 255).astype(np.uint8)
    f = extract_features(LoadedImage.from_array(img), "dense", step=10, size=4)
    xs, ys = np.unique(f.frames[:, 0]), np.unique(f.frames[:, 1])
    assert np.all(np.diff(xs) == 10) and np.all(np.diff(ys) == 10)
    assert xs[0] == 6 and ys[0] == 6  # first descriptor centre: 1.5 bins from the corner (0-based)
    assert len(f) == len(xs) * len(ys)
    np.testing.assert_array_equal(f.frames[:, 2], 8.0)
    assert f.descriptors.dtype == np.uint8 and f.descriptors.shape[1] == 128


def test_frames_reported_in_original_pixels():
    """Half-size working image: frames map back with x_o = 2 (x + 0.5) - 0.5 and A_o = 2 A."""
    fr = np.array([[0.0, 0.0, 1, 0, 0, 1], [10, 20, 2, 1, 0, 3]], np.float32)
    out = frames_to_original(fr, (2.0, 2.0))
    np.testing.assert_allclose(out, [[0.5, 0.5, 2, 0, 0, 2], [20.5, 40.5, 4, 2, 0, 6]])
    np.testing.assert_array_equal(fr[1], [10, 20, 2, 1, 0, 3])  # input untouched


def test_downscaled_extraction_lands_near_full_resolution_features(features_of):
    p = shared_path("opencv_samples", "graf1.png")  # 800 x 640
    full = features_of(p, max_side=None)
    half = features_of(p, max_side=400)
    assert half.image_size == full.image_size == (800, 640)
    assert half.frames[:, 0].max() > 700 and half.frames[:, 1].max() > 560
    d, _ = cKDTree(full.xy).query(half.xy)
    assert np.median(d) < 3.0


def test_config_key_and_unknown_parameter():
    a, b = FeatureExtractor(), FeatureExtractor(threshold=1.0)
    assert a.config_key != b.config_key and a.config_key == FeatureExtractor().config_key
    assert FeatureExtractor(max_side=512).config_key != a.config_key
    assert set(available_detectors()) >= {"hesaff", "sift", "dense"}
    with pytest.raises(ValueError, match="thresold"):
        FeatureExtractor(thresold=1.0)
    with pytest.raises(ValueError, match="detector"):
        FeatureExtractor("surf")
    with pytest.raises(ValueError, match="threshold"):
        FeatureExtractor(threshold=-1.0)
