"""Train the generic models of ``retrieval/data/models`` (see :mod:`retrieval.app.generic_models`).

``make setup`` runs it with ``--if-missing`` (nothing is redone while the models match the presets); the models are
not kept in the repository, and a wheel built after it includes them.

For each bundled preset: an index is created with the training images as its explicit training set, one of them is
indexed (which trains the model), and the index's ``model/`` folder is copied to ``retrieval/data/models/<preset>``
with ``provenance.json`` (training images, count, library version, date, model key, ``use_below``: the
threshold of the library that built it, for the record; an index follows the installed library's
:data:`~retrieval.app.generic_models.USE_BELOW`, so a change of threshold needs no retraining).

Training images: the 805 INRIA Holidays photos of ``../shared/data/real/holidays805/jpg`` (Jegou et al. 2008;
everyday holiday photos, 325 x 243 thumbnails). They are independent of the demo photos and of a user's folder;
the evaluation commands never use the shipped models (``eval run`` trains on the benchmark or on --train-root).

Usage:
    .venv/bin/python scripts/train_generic_models.py [--data ../shared/data] [--features DIR] [--presets a,b]
        [--if-missing]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import tempfile
from pathlib import Path

from retrieval._version import __version__
from retrieval.app.generic_models import TRAINING_FOLDER, model_key, models_folder, provenance, use_below
from retrieval.app.index import Index
from retrieval.engine.presets import load_preset
from retrieval.features.image import IMAGE_EXTENSIONS

SOURCE = ("INRIA Holidays (Jegou, Douze and Schmid, ECCV 2008): 805 photos, 325 x 243 thumbnails "
          "(../shared/data/real/holidays805/jpg)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--features", default=None, help="feature store to reuse (default: a temporary one)")
    ap.add_argument("--presets", default="default,compact,accurate,object")
    ap.add_argument("--if-missing", action="store_true", help="only the presets without a matching model")
    args = ap.parse_args()
    def current(name: str) -> bool:
        # a matching model, with the verification's match cells and the record of its training images (models of
        # earlier versions have neither)
        return provenance(load_preset(name)) is not None and all(
            (models_folder() / name / f).is_file() for f in ("match_cells.npz", "training.json"))

    names = [n for n in args.presets.split(",") if not (args.if_missing and current(n))]
    if not names:
        print("generic models up to date")
        return
    folder = Path(args.data).joinpath(*TRAINING_FOLDER)
    if not folder.is_dir():
        raise SystemExit(f"{folder}: not found; the generic models are learnt from these photos.")
    images = sorted(str(p.resolve()) for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not images:
        raise SystemExit(f"{folder}: no training images.")
    for name in names:
        preset = load_preset(name)
        with tempfile.TemporaryDirectory() as tmp:
            idx = Index.create(Path(tmp) / "index", preset, train_images=images, train_on="collection",
                               feature_store=args.features or Path(tmp) / "features")
            idx.sync([images[0]])
            info = json.loads((idx.path / "model" / "model.json").read_text("utf-8"))
            out = models_folder() / name
            shutil.rmtree(out, ignore_errors=True)
            shutil.copytree(idx.path / "model", out)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        prov = {"preset": name, "preset_version": preset["version"], "model_key": model_key(preset),
                "trained_on": SOURCE, "images": len(images), "use_below": use_below(name),
                "library_version": __version__, "date": datetime.date.today().isoformat(),
                "effective": info.get("effective") or {}, "bytes": size}
        (out / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n", "utf-8")
        print(f"{name}: {out} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
