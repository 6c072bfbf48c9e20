"""The pipeline that chains the stages from a named preset: extraction -> aggregation -> codes -> search.

Two backends behind one small interface (:class:`retrieval.engine.backend.Backend`); :func:`make_backend` picks
one from the preset's ``kind``:

- ``global`` and ``binary`` (:class:`retrieval.engine.global_backend.GlobalBackend`): an encoder (RootSIFT, local
  PCA to 64-d, a Fisher vector or VLAD, Jegou et al. 2012, eq. 6 / eq. 18, power + L2 normalisation eq. 7,
  optional PCA of the aggregated vector) composed with a first stage (:mod:`retrieval.engine.first_stages`):
  exhaustive inner product, or IVFADC (Jegou et al. 2012, sec. V-A) once the collection has ``index.min_images``
  images; PQ codes only with ``index.type`` ``adc`` / ``ivfadc_adc`` (eq. 21-23 / sec. VI-C); binary codes searched
  with an asymmetric distance for ``binary`` (Gordo et al. 2014);
- ``object`` (:mod:`retrieval.engine.object.backend`): the large-vocabulary inverted file with delta_1 of Zhu et al.
  2013, through :class:`retrieval.engine.object.searcher.ObjectSearcher`.

Every backend's ``search`` returns :class:`retrieval.engine.hits.Hit` records. Spatial re-ranking of a shortlist
(:meth:`retrieval.rerank.verifier.Verifier.rerank`, Philbin et al. 2007) is shared by the global, codes-only and binary
backends; the object backend verifies with its own visual-word correspondences.
"""

from __future__ import annotations

from retrieval.engine.backend import Backend
from retrieval.engine.config import GLOBAL_INDEX_TYPES
from retrieval.engine.presets import preset_config


def make_backend(preset: dict) -> Backend:
    """The backend for ``preset['kind']``: :class:`GlobalBackend` (its first stage from ``index.type``) for
    ``global`` and ``binary``, :class:`ObjectBackend` for ``object``.

    Each backend module is imported here, when it is needed: a query loads only its own backend's dependencies
    (the binary codes' numba kernels stay unloaded for a global index, and so on), which keeps a cold
    ``retrieval query`` short."""
    cfg = preset_config(preset)
    kind = cfg.kind
    if kind in ("global", "binary"):
        if kind == "global" and cfg.index.type not in GLOBAL_INDEX_TYPES:
            raise ValueError(f"preset {preset['name']!r}: index.type must be one of {', '.join(GLOBAL_INDEX_TYPES)}; "
                             f"got {cfg.index.type!r}.")
        from retrieval.engine.global_backend import GlobalBackend

        return GlobalBackend(preset)
    if kind == "object":
        from retrieval.engine.object.backend import ObjectBackend

        return ObjectBackend(preset)
    raise ValueError(f"preset {preset['name']!r}: unknown kind {kind!r}.")
