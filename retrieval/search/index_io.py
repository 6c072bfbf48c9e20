"""Folder format of the big indexes (``retrieval-ivfadc``, version 1), documented in docs/formats.md.

An index is a folder holding ``header.json`` and one ``.npy`` file per array::

    header.json          {"format": "retrieval-ivfadc", "format_version": 1, "library_version": ...,
                          "params": {...IVFADC.__init__...}, "d": d, "ntotal": n, "next_id": ...,
                          "arrays": {name: {"shape": [...], "dtype": "..."}}}
    centroids.npy        (nlist, d) float32        coarse quantiser
    pq_codebooks.npy     (M, ksub, dsub) float32   residual PQ
    codes.npy            (ntotal, M) uint8/uint16  inverted lists, contiguous, list after list
    ids.npy              (ntotal,) int64
    offsets.npy          (nlist + 1,) int64        list l = rows offsets[l]:offsets[l+1]
    vectors.npy          (ntotal, d) float16/32    only with store_vectors
    refine_codebooks.npy / refine_codes.npy        only with refine_M > 0

Arrays are opened with ``np.load(..., mmap_mode="r", allow_pickle=False)``: opening reads the header and the
small arrays' pages on demand, never the codes. Saving writes a sibling temporary folder and swaps it in
(rename), so a crash leaves the old index or the new one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from retrieval._version import __version__
from retrieval.codes.pq import ProductQuantizer
from retrieval.core.persistence import (
    FormatError,
    fsync_dir,
    init_params,
    save_npy_atomic,
    write_json_atomic,
)

IVFADC_FORMAT = "retrieval-ivfadc"
IVFADC_FORMAT_VERSION = 1

__all__ = ["IVFADC_FORMAT", "IVFADC_FORMAT_VERSION", "load_ivfadc_parts", "read_header", "save_ivfadc"]


def _arrays_of(index) -> dict:
    arrays = {
        "centroids": index.centroids_,
        "pq_codebooks": index.pq_.codebooks_,
        "codes": index.codes_,
        "ids": index.ids_,
        "offsets": index.offsets_,
    }
    if index.vectors_ is not None:
        arrays["vectors"] = index.vectors_
    if index.refine_pq_ is not None:
        arrays["refine_codebooks"] = index.refine_pq_.codebooks_
        arrays["refine_codes"] = index.refine_codes_
    return arrays


def save_ivfadc(index, folder) -> Path:
    """Write a fitted :class:`~retrieval.search.IVFADC` to ``folder`` (compacting removed entries first)."""
    index.compact()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    arrays = _arrays_of(index)
    params = init_params(index)
    if not (params.get("random_state") is None or isinstance(params.get("random_state"), int)):
        params["random_state"] = None
    header = {
        "format": IVFADC_FORMAT,
        "format_version": IVFADC_FORMAT_VERSION,
        "class": "retrieval.search.ivfadc.IVFADC",
        "library_version": __version__,
        "params": params,
        "d": int(index.d_),
        "ntotal": int(index.ids_.shape[0]),
        "next_id": int(index.next_id_),
        "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()},
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        for name, arr in arrays.items():
            save_npy_atomic(tmp / f"{name}.npy", arr)
        write_json_atomic(tmp / "header.json", header)
        old = None
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{os.getpid()}"
            os.replace(folder, old)
        os.replace(tmp, folder)
        fsync_dir(folder.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def read_header(folder) -> dict:
    """Read and check ``header.json`` of an index folder (format name and version)."""
    folder = Path(folder)
    hp = folder / "header.json"
    if not hp.exists():
        raise FileNotFoundError(f"{folder}: not an index folder (no header.json).")
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FormatError(f"{hp}: cannot read index header: {exc}") from None
    if header.get("format") != IVFADC_FORMAT:
        raise FormatError(f"{hp}: format {header.get('format')!r}, expected {IVFADC_FORMAT!r}.")
    if header.get("format_version") != IVFADC_FORMAT_VERSION:
        raise FormatError(f"{hp}: format version {header.get('format_version')!r}; this library reads version "
                          f"{IVFADC_FORMAT_VERSION}.")
    return header


def _quantizer(M, nbits, codebooks, d, **params) -> ProductQuantizer:
    pq = ProductQuantizer(M, nbits, **params)
    pq.codebooks_ = np.array(codebooks)
    pq.d_, pq.ksub_, pq.dsub_ = int(d), pq.codebooks_.shape[1], pq.codebooks_.shape[2]
    pq.codes_ = np.empty((0, pq.M), dtype=pq.code_dtype)
    pq.forget_tables()
    return pq


def load_ivfadc_parts(folder, *, mmap: bool = True):
    """Read an index folder written by :func:`save_ivfadc` (used by ``IVFADC.load``, which assembles the index).

    Returns
    -------
    header : dict -- the checked ``header.json``
    arrays : dict of name -> ndarray, memory-mapped read-only when ``mmap``
    pq : ProductQuantizer -- the residual quantiser
    refine_pq : ProductQuantizer or None
    """
    folder = Path(folder)
    header = read_header(folder)
    arrays = {}
    for name, meta in header["arrays"].items():
        path = folder / f"{name}.npy"
        try:
            arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise FormatError(f"{path}: cannot read index array: {exc}") from None
        if list(arr.shape) != meta["shape"] or str(arr.dtype) != meta["dtype"]:
            raise FormatError(f"{path}: array {arr.dtype} {list(arr.shape)} does not match the header "
                              f"({meta['dtype']} {meta['shape']}).")
        arrays[name] = arr
    p, d = header["params"], int(header["d"])
    pq = _quantizer(p["M"], p["nbits"], arrays["pq_codebooks"], d, n_iter=p["n_iter"],
                    max_points_per_centroid=p["max_points_per_centroid"])
    refine_pq = None
    if "refine_codebooks" in arrays:
        refine_pq = _quantizer(p["refine_M"], p["refine_nbits"], arrays["refine_codebooks"], d)
    offsets = arrays["offsets"]
    if offsets.shape != (p["nlist"] + 1,) or offsets[-1] != arrays["codes"].shape[0]:
        raise FormatError(f"{folder}: offsets do not match the codes ({offsets.shape}, {arrays['codes'].shape}).")
    return header, arrays, pq, refine_pq
