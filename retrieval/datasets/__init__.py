"""Benchmark datasets: manifests of the official file lists, loaders, and a safe resumable downloader.

Loaders check the folder against ``retrieval/data/manifests/<name>.json`` and raise ``FileNotFoundError`` saying
exactly what is missing; each returns a :class:`~retrieval.datasets.base.RetrievalDataset`.
"""

from retrieval.datasets.base import Query, RetrievalDataset
from retrieval.datasets.copydays import load_copydays
from retrieval.datasets.holidays import load_holidays
from retrieval.datasets.manifest import check_files, load_manifest, manifest_names
from retrieval.datasets.oxford import load_oxford
from retrieval.datasets.revisited import load_revisited
from retrieval.datasets.ukb import load_ukb

DATASETS = ("holidays", "holidays_rotated", "oxford5k", "paris6k", "oxford105k", "paris106k", "roxford5k",
            "rparis6k", "roxford5k+r1m", "rparis6k+r1m", "ukb", "copydays")


def load_dataset(name: str, root, *, distractors_root=None) -> RetrievalDataset:
    """Load a benchmark by name (see ``DATASETS``); ``distractors_root`` for the 105k / +R1M / Copydays variants."""
    if name in ("holidays", "holidays_rotated"):
        return load_holidays(root, rotated=name == "holidays_rotated")
    if name in ("oxford5k", "paris6k"):
        return load_oxford(root, name)
    if name in ("oxford105k", "paris106k"):
        if distractors_root is None:
            raise ValueError(f"{name} needs the Flickr100k distractors: give distractors_root (--distractors DIR).")
        return load_oxford(root, {"oxford105k": "oxford5k", "paris106k": "paris6k"}[name],
                           distractors_root=distractors_root)
    if name in ("roxford5k", "rparis6k", "roxford5k+r1m", "rparis6k+r1m"):
        base = name.split("+")[0]
        if name.endswith("+r1m") and distractors_root is None:
            raise ValueError(f"{name} needs the R1M distractors: give distractors_root (--distractors DIR).")
        return load_revisited(root, base, r1m_root=distractors_root if name.endswith("+r1m") else None)
    if name == "ukb":
        return load_ukb(root)
    if name == "copydays":
        return load_copydays(root, distractors_root=distractors_root)
    raise ValueError(f"unknown dataset {name!r}: expected one of {', '.join(DATASETS)}.")


__all__ = ["DATASETS", "Query", "RetrievalDataset", "check_files", "load_dataset", "load_manifest",
           "manifest_names"]
