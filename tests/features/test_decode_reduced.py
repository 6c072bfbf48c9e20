"""Decoding at the size needed (:func:`retrieval.features.image.load_image`, ``reduce``): real photos of
../shared/data/real/oxford133 enlarged on the fly to 12 megapixels, decoded reduced (JPEG and MPO through Pillow's
``draft``, PNG through ``Image.reduce``) against the same files decoded in full; EXIF orientation after the draft;
the sizes recorded are the original ones; the decoder is part of the extractor's key."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_path
from PIL import Image
from scipy.spatial import cKDTree

from retrieval.app.index_support import image_meta
from retrieval.features import FeatureExtractor
from retrieval.features.extractor import config_key
from retrieval.features.image import decode_cost, load_image

PHOTOS = ("all_souls_000007.jpg", "all_souls_000054.jpg")   # landscape 1024 x 768 Oxford photos


def _enlarged(name: str, size=(4000, 3000)) -> Image.Image:
    """The Oxford photo ``name`` enlarged (bicubic) to ``size``: a 12-megapixel photo made on the fly."""
    with Image.open(shared_path("real", "oxford133", "jpg", name)) as im:
        return im.convert("RGB").resize(size, Image.BICUBIC)


@pytest.fixture(scope="module")
def big_files(tmp_path_factory):
    """``{photo name: {"jpg": path, "png": path}}``: the photos enlarged to 4000 x 3000."""
    folder = tmp_path_factory.mktemp("decode")
    out = {}
    for name in PHOTOS:
        big = _enlarged(name)
        stem = name.rsplit(".", 1)[0]
        out[name] = {"jpg": folder / f"{stem}.jpg", "png": folder / f"{stem}.png"}
        big.save(out[name]["jpg"], quality=92)
        big.save(out[name]["png"], compress_level=1)
    return out


def _agreement(path, extractor):
    """Features of ``path`` decoded reduced and in full: (count ratio, fraction of the reduced decode's keypoints
    with a full-decode keypoint within 1 working pixel)."""
    reduced, full = load_image(path), load_image(path, reduce="none")
    assert reduced.size == full.size and reduced.scale_xy == full.scale_xy
    a, b = extractor(reduced), extractor(full)
    s = np.asarray(reduced.scale_xy)
    dist, _ = cKDTree(b.frames[:, :2] / s).query(a.frames[:, :2] / s)
    return len(a) / len(b), float(np.mean(dist <= 1.0)), a


@pytest.mark.parametrize("kind", ["jpg", "png"])
@pytest.mark.parametrize("name", PHOTOS)
def test_a_12_megapixel_photo_decoded_reduced_has_the_features_of_its_full_decode(big_files, name, kind):
    path = big_files[name][kind]
    cost = decode_cost(path)
    assert cost.size == (4000, 3000) and cost.decoded == (2000, 1500)   # the reduced decode is what is costed
    ratio, close, feats = _agreement(path, FeatureExtractor())
    assert abs(ratio - 1) <= 0.03, ratio
    assert close >= 0.9, close
    # what is recorded is the original photo: the extractor's image size, the catalog's header read
    assert feats.image_size == (4000, 3000) and image_meta(str(path)) == (4000, 3000, 1)
    assert feats.frames[:, 0].max() > 3000 and feats.frames[:, 1].max() > 2000   # frames in original pixels


def test_exif_orientation_is_applied_to_the_reduced_decode(big_files, tmp_path):
    """A 12 MP photo stored sideways (3000 x 4000 pixels) with EXIF orientation 6 is loaded upright at 4000 x 3000,
    decoded reduced in the file's own axes, with the pixels of the upright file."""
    upright = _enlarged(PHOTOS[0])
    exif = Image.Exif()
    exif[0x0112] = 6   # "rotate 90 degrees clockwise to display"
    upright.transpose(Image.Transpose.ROTATE_90).save(tmp_path / "sideways.jpg", quality=92, exif=exif)
    path = tmp_path / "sideways.jpg"
    assert decode_cost(path).decoded == (1500, 2000)
    im, ref = load_image(path), load_image(big_files[PHOTOS[0]]["jpg"])
    assert im.orientation == 6 and im.original_size == (4000, 3000) and im.size == ref.size == (1024, 768)
    assert np.abs(im.pixels.astype(int) - ref.pixels).mean() < 1.0
    full = load_image(path, reduce="none")
    assert np.abs(im.pixels.astype(int) - full.pixels).mean() < 1.0
    assert image_meta(str(path)) == (4000, 3000, 6)
    assert FeatureExtractor()(path).image_size == (4000, 3000)


def test_a_camera_mpo_is_decoded_reduced_like_a_jpeg(big_files, tmp_path):
    big = _enlarged(PHOTOS[1])
    big.save(tmp_path / "camera.mpo", format="MPO", save_all=True, append_images=[big.resize((640, 480))],
             quality=92)
    path = tmp_path / "camera.mpo"
    with Image.open(path) as im:
        assert im.format == "MPO"
    assert decode_cost(path).decoded == (2000, 1500)
    assert decode_cost(path, reduce="jpeg").decoded == (4000, 3000)   # the first decoder read it in full
    im = load_image(path)
    assert im.original_size == (4000, 3000) and im.size == (1024, 768)
    assert np.abs(im.pixels.astype(int) - load_image(path, reduce="none").pixels).mean() < 1.0


def test_a_png_whose_sides_have_no_common_factor_is_resized_from_its_full_decode(tmp_path):
    """Reduction by a factor that does not divide both sides would leave a partial block at the edge: such a file
    is decoded in full, exactly as before."""
    _enlarged(PHOTOS[0], (4001, 3000)).save(tmp_path / "odd.png", compress_level=1)
    assert decode_cost(tmp_path / "odd.png").decoded == (4001, 3000)
    np.testing.assert_array_equal(load_image(tmp_path / "odd.png").pixels,
                                  load_image(tmp_path / "odd.png", reduce="none").pixels)


def test_the_decoder_is_part_of_the_extractors_key(big_files):
    """Decoder 2 (reduced decoding of every format) has its own key; decoder 1 keeps the key the stores made before
    were written under; full-resolution extraction decodes in full and keeps one key."""
    new, old = FeatureExtractor(), FeatureExtractor(decoder=1)
    assert new.config["decoder"] == 2 and "decoder" not in old.config
    assert new.config_key != old.config_key
    assert old.config_key == config_key({k: v for k, v in new.config.items() if k != "decoder"})
    assert FeatureExtractor(max_side=None).config_key == FeatureExtractor(max_side=None, decoder=1).config_key
    png = big_files[PHOTOS[0]]["png"]
    np.testing.assert_array_equal(old.load(png).pixels, load_image(png, reduce="none").pixels)
    with pytest.raises(ValueError, match="decoder must be one of 1, 2; got 3"):
        FeatureExtractor(decoder=3)
    with pytest.raises(ValueError, match="reduce must be one of all, jpeg, none; got 'some'"):
        load_image(png, reduce="some")


def test_a_new_index_records_decoder_2_and_one_made_before_keeps_decoder_1(tmp_path):
    from retrieval.app.index import Index

    idx = Index.create(tmp_path / "new")
    try:
        assert idx.catalog.get_meta("decoder") == 2 and idx.extractor.decoder == 2
        idx.catalog.set_meta(decoder=None)   # as in the catalog of an index made before the decoder was recorded
    finally:
        idx.close()
    before = Index.open(tmp_path / "new")
    try:
        assert before.extractor.decoder == 1 and before.extractor.reduce == "jpeg"
    finally:
        before.close()
