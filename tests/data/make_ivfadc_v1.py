"""Regenerate the frozen index folder tests/data/ivfadc_v1 (format retrieval-ivfadc version 1) and its expected
search results. Run once: `.venv/bin/python tests/data/make_ivfadc_v1.py`; the files must then never change
(tests/test_ivfadc_index.py::test_frozen_v1_folder_keeps_loading)."""

from pathlib import Path

import numpy as np

from retrieval.search import IVFADC

here = Path(__file__).parent
rng = np.random.default_rng(2024)
X = rng.standard_normal((80, 8)).astype(np.float32)
Q = rng.standard_normal((5, 8)).astype(np.float32)
ix = IVFADC(4, 2, 4, 2, store_vectors="float16", n_iter=5, random_state=0).fit(X)
ix.add(X, ids=np.arange(1000, 1080))
ix.remove([1003, 1010])
ix.save(here / "ivfadc_v1")
D, ids = ix.search(Q, 5)
Dr, idr = ix.search(Q, 5, rerank=10)
np.savez(here / "ivfadc_v1_expected.npz", queries=Q, D=D, ids=ids, D_rerank=Dr, ids_rerank=idr)
