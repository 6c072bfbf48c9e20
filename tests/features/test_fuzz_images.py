"""Fuzzing image loading and extraction: 2,000 mutated real JPEG, PNG, TIFF and WebP files (bytes flipped,
truncated, duplicated, inserted, header fields overwritten) each end in a clean ``ImageReadError`` naming the file,
or in features -- never another exception, and never more than 10 s for one file."""

from __future__ import annotations

import io
import time

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


@pytest.mark.filterwarnings("ignore")
def test_mutated_images_end_in_features_or_a_clean_error(tmp_path):
    rng = np.random.default_rng(0)
    ex = FeatureExtractor("hesaff", max_side=96, min_side=8)
    base = seeds()
    outcomes = {"features": 0, "error": 0}
    slowest = 0.0
    for n in range(N_FILES):
        ext, data = base[n % len(base)]
        path = tmp_path / f"f{n % 50}.{ext}"
        path.write_bytes(mutate(data, rng))
        t0 = time.perf_counter()
        try:
            f = ex(str(path))
            assert f.descriptors.shape[0] == f.frames.shape[0]
            outcomes["features"] += 1
        except ImageReadError as exc:
            assert str(path) in str(exc) and exc.reason
            outcomes["error"] += 1
        except Exception as exc:  # noqa: BLE001 - the point of the test: name the input that escaped
            pytest.fail(f"mutation {n} of a {ext} file raised {type(exc).__name__}: {exc}")
        slowest = max(slowest, time.perf_counter() - t0)
    assert slowest < 10.0
    assert outcomes["features"] > 100 and outcomes["error"] > 100, outcomes   # both paths were exercised
