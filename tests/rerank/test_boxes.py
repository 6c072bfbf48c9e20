"""retrieval.rerank.boxes on hand-computed boxes: projection (identity, translation, scaling, homography),
clipping, boxes that fall outside the image, degenerate transforms, IoU."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.rerank.boxes import box_iou, clip_box, project_box

BOX = (10.0, 20.0, 30.0, 60.0)


def test_identity_translation_scaling():
    assert project_box(BOX, np.eye(3)) == BOX
    assert project_box(BOX, np.eye(3)[:2]) == BOX                                    # 2x3 affine form
    assert project_box(BOX, [[1, 0, 5], [0, 1, -7]]) == (15.0, 13.0, 35.0, 53.0)      # translation
    assert project_box(BOX, [[2, 0, 0], [0, 0.5, 0]]) == (20.0, 10.0, 60.0, 30.0)     # scaling
    # a mirror swaps the corners: the result is still (min, min, max, max)
    assert project_box(BOX, [[-1, 0, 100], [0, 1, 0]]) == (70.0, 20.0, 90.0, 60.0)
    # rotation by 90 degrees about the origin: (x, y) -> (-y, x)
    assert project_box(BOX, [[0, -1, 0], [1, 0, 0]]) == (-60.0, 10.0, -20.0, 30.0)


def test_homography_is_the_bounding_box_of_the_four_corners():
    H = np.array([[1.0, 0, 0], [0, 1.0, 0], [0.01, 0, 1.0]])  # w = 1 + x / 100
    # corners (0,0) (100,0) (100,100) (0,100) -> (0,0) (50,0) (50,50) (0,100)
    assert project_box((0, 0, 100, 100), H) == (0.0, 0.0, 50.0, 100.0)
    assert project_box((0, 0, 100, 100), 3.0 * H) == (0.0, 0.0, 50.0, 100.0)  # defined up to scale


def test_clipping_to_the_image():
    T = np.array([[2.0, 0.0, 10.0], [0.0, 2.0, 5.0]])
    assert project_box((0, 0, 10, 20), T, (100, 100)) == (10.0, 5.0, 30.0, 45.0)   # inside: untouched
    assert project_box((0, 0, 100, 100), T, (50, 60)) == (10.0, 5.0, 49.0, 59.0)   # clipped to w-1, h-1
    assert project_box((-5, -5, 4, 4), np.eye(3), (10, 10)) == (0.0, 0.0, 4.0, 4.0)
    assert clip_box((-3.0, 2.0, 12.5, 9.0), (10, 8)) == (0.0, 2.0, 9.0, 7.0)
    assert clip_box((2, 3, 4, 5), (10, 10)) == (2.0, 3.0, 4.0, 5.0)


@pytest.mark.parametrize("shift", [(500, 500), (-500, 0), (0, -200), (60, 0)])
def test_a_box_projected_fully_outside_the_image_is_none(shift):
    T = np.array([[1.0, 0, shift[0]], [0, 1.0, shift[1]]])
    assert project_box((0, 0, 10, 10), T, (50, 50)) is None
    assert project_box((0, 0, 10, 10), T) is not None  # without an image nothing is clipped
    assert clip_box((0 + shift[0], 0 + shift[1], 10 + shift[0], 10 + shift[1]), (50, 50)) is None


def test_a_box_touching_the_image_on_one_edge_only_is_none():
    # x from 49 to 59 in an image of width 50: clipped to [49, 49], zero width
    assert project_box((0, 0, 10, 10), [[1, 0, 49], [0, 1, 0]], (50, 50)) is None
    assert project_box((0, 0, 10, 10), [[1, 0, 48], [0, 1, 0]], (50, 50)) == (48.0, 0.0, 49.0, 10.0)


def test_degenerate_transforms():
    # a corner sent to infinity (homogeneous coordinate 0): x = 100 has w = 1 - 100 / 100 = 0
    H = np.array([[1.0, 0, 0], [0, 1.0, 0], [-0.01, 0, 1.0]])
    assert project_box((0, 0, 100, 100), H) is None
    assert project_box((0, 0, 100, 100), H, (640, 480)) is None
    # everything collapsed onto one line or one point: no area
    assert project_box(BOX, [[1, 0, 0], [0, 0, 7]]) is None
    assert project_box(BOX, np.zeros((2, 3))) is None
    assert project_box(BOX, [[np.nan, 0, 0], [0, 1, 0]]) is None
    with pytest.raises(ValueError, match=r"shape \(2, 3\) or \(3, 3\); got \(2, 2\)"):
        project_box(BOX, np.eye(2))


def test_box_iou():
    assert box_iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert box_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)   # 50 / (100 + 100 - 50)
    assert box_iou((0, 0, 10, 10), (2, 2, 4, 4)) == pytest.approx(4 / 100)
    assert box_iou((0, 0, 1, 1), (2, 2, 3, 3)) == 0.0
    assert box_iou((0, 0, 1, 1), (1, 0, 2, 1)) == 0.0                        # touching edges
    assert box_iou((3, 3, 3, 3), (3, 3, 3, 3)) == 0.0                        # empty union
