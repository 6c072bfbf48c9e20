"""Object retrieval by bounding box (Zhu et al. 2013; Tolias et al. 2013 for ASMK*), the ``object`` preset kind.

Public surface:

- :class:`ObjectSearcher` (:mod:`.searcher`): the self-contained engine over local features (large-vocabulary
  BoW in an inverted file, l1 / l2 / delta_1 / delta_2 or ASMK*, exact and spatial re-ranking, query expansion);
- :class:`ObjectBackend` (:mod:`.backend`): that engine as an index backend, its state kept in segments.

Inside: :mod:`.scorers` (one search round per scoring), :mod:`.scores` (the dissimilarities and word matches),
:mod:`.forward` (the forward index of each image's words), :mod:`.parts` (segments and shards scored as one
collection), :mod:`.merge` (segments merged). What the object path shares with the global one (the verifier, the
query's selection in its box, finish_ranking) lives in :mod:`retrieval.rerank` and :mod:`retrieval.engine`.
"""

from retrieval.engine.object.backend import ObjectBackend
from retrieval.engine.object.searcher import ObjectSearcher

__all__ = ["ObjectBackend", "ObjectSearcher"]
