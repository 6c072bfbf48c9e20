"""Regenerate the bundled manifests from the official lists (``python -m retrieval.datasets.make_manifests DATA``).

``DATA`` is a folder laid out like ``../shared/data`` (``holidays/holidays_images.dat``,
``oxford5k/gt_files_170407/``, ``revisited/gnd_r*.pkl``). Names and counts come from those official files; counts
of the sets whose lists we do not have (Flickr100k, R1M, UKB, Copydays) come from the releases' own descriptions.
No official release publishes checksums for these archives, so ``md5``/``sha256`` are ``null``.
The URLs are the releases' published locations; they were not reachable from the machine that wrote this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrieval.core.persistence import atomic_write
from retrieval.datasets.manifest import MANIFEST_FORMAT, MANIFEST_VERSION
from retrieval.evaluation.holidays import load_holidays_gt
from retrieval.evaluation.revisited import load_revisited_gnd

VGG = "https://www.robots.ox.ac.uk/~vgg/data"
INRIA = "ftp://ftp.inrialpes.fr/pub/lear/douze/data"
REVISITOP = "http://cmp.felk.cvut.cz/revisitop/data/datasets"
R1M = "http://ptak.felk.cvut.cz/revisitop/revisitop1m/jpg"


def _archive(url, into=".", flatten=False, **kw):
    return {"url": url, "filename": url.rsplit("/", 1)[-1], "into": into, "flatten": flatten,
            "md5": None, "sha256": None, "size": None, **kw}


def _base(dataset, description, homepage, terms, lists_from):
    return {"format": MANIFEST_FORMAT, "format_version": MANIFEST_VERSION, "dataset": dataset,
            "description": description, "homepage": homepage, "terms": terms, "lists_from": lists_from,
            "filesets": [], "archives": [], "checksums": None}


def build(data: Path) -> dict:
    """All manifests as ``{dataset: manifest}``."""
    out = {}
    hol = load_holidays_gt(data / "holidays" / "holidays_images.dat")
    m = _base("holidays", "INRIA Holidays: 1491 photos, 500 queries (number % 100 == 0), 991 positives.",
              "https://lear.inrialpes.fr/people/jegou/data.php", "INRIA, research use",
              "holidays_images.dat of the official evaluation package")
    m["filesets"].append({"name": "images", "folder": "jpg", "names": list(hol.names), "count": len(hol.names)})
    m["archives"] = [_archive(f"{INRIA}/jpg1.tar.gz", into="jpg", flatten=True),
                     _archive(f"{INRIA}/jpg2.tar.gz", into="jpg", flatten=True)]
    m["notes"] = ("The rotation-corrected copy (images turned upright by hand) is not an official archive: put it in "
                  "'jpg_rotated/' with the same names and load with rotated=True.")
    out["holidays"] = m

    gts = sorted(p.name for p in (data / "oxford5k" / "gt_files_170407").glob("*.txt"))
    for name, title, gtname, archives, gt_archive, gt_names in (
        ("oxford5k", "Oxford Buildings (Philbin et al. 2007): 5063 images, 55 queries with boxes", "gt_files_170407",
         [_archive(f"{VGG}/oxbuildings/oxbuild_images.tgz", into="jpg", flatten=True)],
         _archive(f"{VGG}/oxbuildings/gt_files_170407.tgz", into="gt_files_170407"), gts),
        ("paris6k", "Paris (Philbin et al. 2008): 6392 usable images, 55 queries with boxes", "gt_files_120310",
         [_archive(f"{VGG}/parisbuildings/paris_1.tgz", into="jpg", flatten=True),
          _archive(f"{VGG}/parisbuildings/paris_2.tgz", into="jpg", flatten=True)],
         _archive(f"{VGG}/parisbuildings/paris_120310.tgz", into="gt_files_120310"), None),
    ):
        r = load_revisited_gnd(data / "revisited" / f"gnd_r{name}.pkl")
        names = sorted(f"{n}.jpg" for n in set(r.imlist) | set(r.qimlist))
        m = _base(name, title, f"{VGG}/{'oxbuildings' if name == 'oxford5k' else 'parisbuildings'}/",
                  "VGG terms of access", "imlist + qimlist of the revisitop ground truth (same images)")
        m["filesets"].append({"name": "images", "folder": "jpg", "names": names, "count": len(names)})
        gt_fs = {"name": "ground truth", "folder": gtname, "count": 220, "pattern": "*.txt"}
        if gt_names:
            gt_fs["names"] = gt_names
        m["filesets"].append(gt_fs)
        m["archives"] = archives + [gt_archive]
        out[name] = m

        rname = f"r{name}"
        rm = _base(rname, f"Revisited {name[:-2].capitalize()} (Radenovic et al. 2018): {len(r.imlist)} database "
                          f"images, {len(r.qimlist)} queries, Easy/Medium/Hard.",
                   "http://cmp.felk.cvut.cz/revisitop/", "research use", f"gnd_{rname}.pkl")
        rm["filesets"].append({"name": "images", "folder": "jpg", "names": names, "count": len(names)})
        rm["filesets"].append({"name": "ground truth", "folder": ".", "names": [f"gnd_{rname}.pkl"], "count": 1})
        rm["archives"] = archives + [_archive(f"{REVISITOP}/{rname}/gnd_{rname}.pkl")]
        out[rname] = rm

    m = _base("flickr100k", "Flickr100k distractors of Oxford105k (100,071 images).",
              f"{VGG}/oxbuildings/flickr100k.html", "Flickr terms", "count from the VGG page")
    m["filesets"].append({"name": "images", "folder": "flickr100k", "count": 100071, "pattern": "*.jpg"})
    m["notes"] = "Distributed as multi-part RAR archives: download and unpack them by hand into 'flickr100k/'."
    out["flickr100k"] = m

    m = _base("r1m", "revisitop 1M distractors (1,001,001 images) for ROxford/RParis + R1M.",
              "http://cmp.felk.cvut.cz/revisitop/", "research use", "count from the revisitop release")
    m["filesets"].append({"name": "images", "folder": "jpg", "count": 1001001, "pattern": "*.jpg"})
    m["archives"] = [_archive(f"{R1M}/revisitop1m.{i}.tar.gz", into="jpg", flatten=True) for i in range(1, 101)]
    out["r1m"] = m

    m = _base("ukb", "University of Kentucky Benchmark (Nister & Stewenius 2006): 10,200 images, groups of 4.",
              "https://archive.org/details/ukbench", "research use", "names ukbench00000.jpg .. ukbench10199.jpg")
    m["filesets"].append({"name": "images", "folder": "full", "count": 10200,
                          "name_range": {"format": "ukbench{:05d}.jpg", "start": 0, "stop": 10200}})
    m["archives"] = [_archive("https://archive.org/download/ukbench/ukbench.zip")]
    out["ukb"] = m

    m = _base("copydays", "INRIA Copydays (Douze et al. 2009): 157 originals, crops, JPEG qualities, 229 strong "
                          "attacks.", "https://lear.inrialpes.fr/people/jegou/data.php", "INRIA, research use",
              "counts from the release page")
    m["filesets"] += [{"name": "originals", "folder": "original", "count": 157, "pattern": "*.jpg"},
                      {"name": "strong", "folder": "strong", "count": 229, "pattern": "*.jpg"},
                      {"name": "crops", "folder": "crops", "count": 157, "pattern": "*.jpg"},
                      {"name": "jpeg", "folder": "jpegqual", "count": 157, "pattern": "*.jpg"}]
    m["archives"] = [_archive(f"{INRIA}/copydays_original.tar.gz"), _archive(f"{INRIA}/copydays_crop.tar.gz"),
                     _archive(f"{INRIA}/copydays_jpeg.tar.gz"), _archive(f"{INRIA}/copydays_strong.tar.gz")]
    m["notes"] = "Distractors (e.g. Flickr100k) are given to the loader as a separate folder."
    out["copydays"] = m
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m retrieval.datasets.make_manifests DATA_FOLDER\n")
        return 2
    target = Path(__file__).resolve().parents[1] / "data" / "manifests"
    for name, m in build(Path(argv[0])).items():
        with atomic_write(target / f"{name}.json", "w") as fh:  # compact: one line per key, lists inline
            fh.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in m.items()) + "\n}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
