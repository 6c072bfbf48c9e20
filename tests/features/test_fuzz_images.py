"""Fuzzing image loading and extraction: 2,000 mutated real JPEG, PNG, TIFF and WebP files (bytes flipped,
truncated, duplicated, inserted, header fields overwritten) each end in a clean ``ImageReadError`` naming the file,
or in features -- never another exception; the work a file costs is bounded by its header (no decode of more
pixels than the decompression-bomb guard allows), and no file hangs the extraction."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from retrieval.features import FeatureExtractor
from retrieval.features.image import ImageReadError

N_FILES = 2000


def seeds():
    """Small real photos (scikit-image) in the four formats."""
    import skimage.data
    from PIL import Image

    out = []
    for name in ("astronaut", "coffee", "chelsea", "camera"):
        im = Image.fromarray(getattr(skimage.data, name)())
        im.thumbnail((96, 96))
        for fmt, kw in (("JPEG", {"quality": 85}), ("PNG", {}), ("TIFF", {}), ("WEBP", {"quality": 80})):
            buf = io.BytesIO()
            im.convert("RGB" if fmt != "PNG" else im.mode).save(buf, fmt, **kw)
            out.append((fmt.lower().replace("jpeg", "jpg"), buf.getvalue()))
    return out


def mutate(data: bytes, rng) -> bytes:
    b = bytearray(data)
    kind = rng.integers(6)
    if kind == 0:                                   # flip random bytes
        for i in rng.integers(0, len(b), rng.integers(1, 20)):
            b[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:                                 # truncate
        b = b[: int(rng.integers(0, len(b)))]
    elif kind == 2:                                 # overwrite a header field with extreme values
        i = int(rng.integers(0, min(64, len(b))))
        b[i:i + 4] = bytes(rng.choice([0x00, 0xFF, 0x7F, 0x80], 4).astype(np.uint8))
    elif kind == 3:                                 # duplicate a chunk
        i, j = sorted(int(x) for x in rng.integers(0, len(b), 2))
        b = b[:j] + b[i:j] + b[j:]
    elif kind == 4:                                 # insert random bytes
        i = int(rng.integers(0, len(b)))
        b = b[:i] + bytearray(rng.integers(0, 256, int(rng.integers(1, 64))).astype(np.uint8)) + b[i:]
    else:                                           # zero a run
        i = int(rng.integers(0, len(b)))
        b[i:i + int(rng.integers(1, 256))] = bytes(min(len(b) - i, 255) or 0)
    return bytes(b)


MAX_MEGAPIXELS = 1.0
"""The extractor's decompression-bomb guard in this test (the seeds have 0.01 megapixels): a mutated header that
declares more is refused before decoding, so that every file's decode is bounded (with the seed below, a few
mutated headers declare 1.1 to 4.1 megapixels and are refused)."""

HANG_DEADLINE = 600.0
"""Seconds the whole run may take before the test calls it hung (it takes about 10 s on 2 idle cores): a guard
against a decoder that never returns, not a speed figure."""


@pytest.mark.filterwarnings("ignore")
def test_mutated_images_end_in_features_or_a_clean_error(tmp_path, monkeypatch):
    from PIL import Image, ImageFile

    # every decode of an image file goes through Image.Image.load (Pillow's ImageFile.load and its TIFF and WebP
    # overrides call it): record the size of what each file decodes
    decoded: list[tuple[int, int]] = []
    load = Image.Image.load

    def recording_load(self):
        if isinstance(self, ImageFile.ImageFile):
            decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(Image.Image, "load", recording_load)
    rng = np.random.default_rng(0)
    ex = FeatureExtractor("hesaff", max_side=96, min_side=8, max_megapixels=MAX_MEGAPIXELS)
    base = seeds()
    outcomes = {"features": 0, "error": 0, "refused as too large": 0}
    largest = [0, None]   # pixels, mutation
    problems: list[str] = []
    current = [0, ""]     # the mutation being read, named if the run hangs

    def run():
        for n in range(N_FILES):
            ext, data = base[n % len(base)]
            current[:] = [n, ext]
            path = tmp_path / f"f{n % 50}.{ext}"
            path.write_bytes(mutate(data, rng))
            decoded.clear()
            try:
                f = ex(str(path))
                if f.descriptors.shape[0] != f.frames.shape[0]:
                    problems.append(f"mutation {n} of a {ext} file: {f.descriptors.shape[0]} descriptors, "
                                    f"{f.frames.shape[0]} frames")
                if not decoded:   # the recorder sees every decode (else the bound below proves nothing)
                    problems.append(f"mutation {n} of a {ext} file gave features without a recorded decode")
                outcomes["features"] += 1
            except ImageReadError as exc:
                if not (str(path) in str(exc) and exc.reason):
                    problems.append(f"mutation {n} of a {ext} file: an error not naming the file: {exc}")
                outcomes["error"] += 1
                outcomes["refused as too large"] += "decompression-bomb guard" in exc.reason
            except Exception as exc:  # noqa: BLE001 - the point of the test: name the input that escaped
                problems.append(f"mutation {n} of a {ext} file raised {type(exc).__name__}: {exc}")
            for w, h in decoded:
                if w * h > largest[0]:
                    largest[:] = [w * h, f"mutation {n} of a {ext} file, {w}x{h}"]

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_DEADLINE)
    assert not worker.is_alive(), f"mutation {current[0]} of a {current[1]} file has not finished after " \
                                  f"{HANG_DEADLINE:g} s: the extraction hangs on it"
    assert not problems, problems[:10]
    # the work is bounded by the header: no file decoded more pixels than the guard allows
    assert largest[0] <= MAX_MEGAPIXELS * 1e6, largest
    assert outcomes["refused as too large"] > 0, outcomes     # the guard was exercised: mutated headers hit it
    assert outcomes["features"] > 100 and outcomes["error"] > 100, outcomes   # both paths were exercised
