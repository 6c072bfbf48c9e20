"""The demo photo folder: scikit-image's bundled real photos plus generated views of some of them.

Views (each a new file, so that a query finds its relatives): crops, small rotations, scale changes and strong
JPEG compression. Deterministic; written with Pillow.
"""

from __future__ import annotations

from pathlib import Path

# bundled real photographs (not drawings or microscopy); the first ones get generated views
PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "motorcycle_left", "motorcycle_right", "camera",
          "immunohistochemistry", "hubble_deep_field", "retina", "moon", "page", "coins", "brick", "grass",
          "gravel", "clock"]
WITH_VIEWS = ["coffee", "chelsea", "astronaut", "rocket", "motorcycle_left", "camera"]


def _load(name):
    import numpy as np
    import skimage.data
    from PIL import Image

    side = None
    if name.startswith("motorcycle_"):  # a real stereo pair: two views of one scene
        side = 0 if name.endswith("left") else 1
        name = "stereo_motorcycle"
    fn = getattr(skimage.data, name, None)
    if fn is None:
        return None
    try:
        arr = fn() if side is None else fn()[side]
    except Exception:  # noqa: BLE001 - a fetcher that needs the network: skip that photo
        return None
    arr = np.asarray(arr)
    if arr.dtype != np.uint8:
        arr = (255 * (arr.astype(float) - arr.min()) / max(float(np.ptp(arr)), 1e-9)).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[..., :3]
    return Image.fromarray(arr)


def build_demo_folder(out) -> dict:
    """Write the demo photos into ``out`` (created); return ``{"photos": [...], "views": {name: [...]}}``."""
    from PIL import Image

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {"photos": [], "views": {}}
    for name in PHOTOS:
        im = _load(name)
        if im is None:
            continue
        if max(im.size) > 640:
            im.thumbnail((640, 640))
        im = im.convert("RGB")
        p = out / f"{name}.png"
        im.save(p)
        written["photos"].append(str(p))
        if name not in WITH_VIEWS:
            continue
        w, h = im.size
        views = []
        sub = out / "views" / name
        sub.mkdir(parents=True, exist_ok=True)
        crop = im.crop((int(0.15 * w), int(0.1 * h), int(0.85 * w), int(0.8 * h)))
        views.append(("crop.jpg", crop))
        views.append(("rotate8.jpg", im.rotate(8, resample=Image.BICUBIC, expand=True, fillcolor=(128, 128, 128))))
        views.append(("rotate-12.jpg", im.rotate(-12, resample=Image.BICUBIC, expand=False)))
        views.append(("scale60.jpg", im.resize((int(0.6 * w), int(0.6 * h)), Image.LANCZOS)))
        views.append(("scale140_crop.jpg", im.resize((int(1.4 * w), int(1.4 * h)), Image.LANCZOS)
                      .crop((int(0.2 * w), int(0.2 * h), int(1.2 * w), int(1.2 * h)))))
        paths = []
        for fname, v in views:
            q = 25 if fname == "scale60.jpg" else 85
            p = sub / fname
            v.save(p, quality=q)
            paths.append(str(p))
        written["views"][name] = paths
    return written
