"""Estimator files written by 0.1.x name their class by its 0.1.x module path (``retrieval.indexing.pq``, ...):
they load through the class and through ``load_estimator``, and answer exactly like the file they were made from."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.codes import ProductQuantizer
from retrieval.core.persistence import LEGACY_MODULES, FormatError, canonical_class, load_estimator


def _rewrite_class(path, qualified):
    """Rewrite the header's class path of an estimator file (as 0.1.x wrote it); arrays unchanged."""
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(bytes(z["__header__"]).decode("utf-8"))
        arrays = {k: z[k] for k in z.files if k != "__header__"}
    header["class"] = qualified
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    np.savez(path, __header__=blob, **arrays)


def test_legacy_class_path_loads_and_searches_the_same(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 16)).astype(np.float32)
    pq = ProductQuantizer(M=4, nbits=4, random_state=0).fit(X)
    path = pq.save(tmp_path / "pq.npz")
    _rewrite_class(path, "retrieval.indexing.pq.ProductQuantizer")
    for loaded in (ProductQuantizer.load(path), load_estimator(path)):
        assert type(loaded) is ProductQuantizer
        np.testing.assert_array_equal(loaded.encode(X[:50]), pq.encode(X[:50]))


def test_legacy_map_names_only_existing_modules():
    import importlib

    for old, new in LEGACY_MODULES.items():
        assert old.startswith("retrieval.") and importlib.import_module(new)
    assert canonical_class("retrieval.indexing.ivfadc.IVFADC") == "retrieval.search.ivfadc.IVFADC"
    assert canonical_class("retrieval.codes.pq.ProductQuantizer") == "retrieval.codes.pq.ProductQuantizer"


def test_foreign_class_is_still_refused(tmp_path):
    pq = ProductQuantizer(M=2, nbits=2, random_state=0).fit(np.random.default_rng(1).standard_normal((64, 4)))
    path = pq.save(tmp_path / "pq.npz")
    _rewrite_class(path, "os.system")
    with pytest.raises(FormatError, match="outside the retrieval package"):
        load_estimator(path)
