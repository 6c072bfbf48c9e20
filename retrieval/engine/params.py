"""A search's parameters as one value: :class:`SearchParams`, checked in one place, and its typed error.

A search is ``(query, params)``. Each edge builds one :class:`SearchParams` from what it was given (the command
line's options, the web request's fields, the keywords of a Python call), and every layer below takes that value:
:meth:`retrieval.app.index.Index.search`, :meth:`retrieval.app.searcher.Searcher.search`, a backend's ``search``
and the object searcher. A new search option is a field here, the code that uses it and the edges' parsing; no
signature in between changes.

Two checks, each in one place:

- the value's own (:meth:`SearchParams.__post_init__`): ``k`` an integer >= 1, ``query_expansion`` an integer >= 0,
  ``alpha`` a positive number, ``shortlist`` an integer >= 1;
- against what the searched index offers (:meth:`SearchParams.resolve`, called once per search by the searcher):
  the scoring ``method`` and the re-ranking among the backend's, query expansion only with spatial re-ranking,
  ``alpha`` only where the scoring has one. It returns a :class:`Resolved` value with every default of the preset
  filled in, which the layers below use without checking again.

A refused value raises :class:`~retrieval.core.checks.ParamError` (a ``ValueError``) naming the parameter, the
value and what was expected; each edge words it in its own terms (a flag on the command line, a field in the API's
JSON error) from those fields, never by editing the message.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from retrieval.core.checks import ParamError

__all__ = ["Offer", "ParamError", "Resolved", "SearchContext", "SearchParams"]


@dataclass(frozen=True)
class Offer:
    """What a backend offers a search: its scorings (``methods``), its re-rankings (``reranks``) and the scorings
    that take an ``alpha`` (with the default of each, :data:`retrieval.engine.config.METHOD_ALPHA`)."""

    methods: tuple[str, ...]
    reranks: tuple[str, ...]
    alphas: dict | None = None


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class SearchParams:
    """The parameters of one search (None: the preset's).

    Attributes
    ----------
    k : int — number of results (>= 1)
    method : str or None — the scoring, among the backend's (global: ip; binary: hamming, expectation, ...;
        object: l1, l2, delta1, delta2, asmk); None: the preset's ``search.method``
    rerank : str or None — none, spatial (object: also exact); None: the preset's ``search.rerank``
    query_expansion : int or None — verified hits averaged into the query (0: off; needs spatial re-ranking);
        None: the preset's ``search.query_expansion``
    alpha : float or None — alpha_1 / alpha_2 of delta_1 / delta_2, or ASMK*'s selectivity exponent (object
        presets); None: the preset's for its own scoring, the scoring's default for another
    shortlist : int or None — images verified; None: the preset's (``search.shortlist``, object:
        ``search.verify_top``)
    min_similarity : float or None — of the ``k`` best, only the hits verified or of at least this similarity
        (0 to 1; a verified hit shows the same object whatever its first-stage similarity)
    verified_only : bool — of the ``k`` best, only the verified hits
    """

    k: int = 10
    method: str | None = None
    rerank: str | None = None
    query_expansion: int | None = None
    alpha: float | None = None
    shortlist: int | None = None
    min_similarity: float | None = None
    verified_only: bool = False

    def __post_init__(self):
        if not _is_int(self.k) or self.k < 1:
            raise ParamError("k", self.k, "an integer >= 1 (the number of results)")
        object.__setattr__(self, "k", int(self.k))
        for name in ("method", "rerank"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ParamError(name, value, "a name (a string)")
        if self.query_expansion is not None:
            if not _is_int(self.query_expansion) or self.query_expansion < 0:
                raise ParamError("query_expansion", self.query_expansion,
                                 "an integer >= 0 (verified hits averaged into the query)")
            object.__setattr__(self, "query_expansion", int(self.query_expansion))
        if self.alpha is not None:
            if isinstance(self.alpha, bool) or not isinstance(self.alpha, numbers.Real) or not self.alpha > 0 \
                    or self.alpha == float("inf"):
                raise ParamError("alpha", self.alpha, "a finite number > 0")
            object.__setattr__(self, "alpha", float(self.alpha))
        if self.shortlist is not None:
            if not _is_int(self.shortlist) or self.shortlist < 1:
                raise ParamError("shortlist", self.shortlist, "an integer >= 1 (images verified)")
            object.__setattr__(self, "shortlist", int(self.shortlist))
        if self.min_similarity is not None:
            if isinstance(self.min_similarity, bool) or not isinstance(self.min_similarity, numbers.Real) \
                    or not 0 <= self.min_similarity <= 1:
                raise ParamError("min_similarity", self.min_similarity, "a number from 0 to 1")
            object.__setattr__(self, "min_similarity", float(self.min_similarity))
        if not isinstance(self.verified_only, bool):
            raise ParamError("verified_only", self.verified_only, "true or false")

    @classmethod
    def of(cls, params: SearchParams | None = None, **given) -> SearchParams:
        """``params`` with the fields ``given`` (None values left out) replaced; a new value from ``given``
        alone when ``params`` is None (the Python edge: ``Index.search(image, k=5)``). An unknown name is a
        ``TypeError`` listing the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise TypeError(f"unknown search parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}.")
        given = {name: v for name, v in given.items() if v is not None}
        return cls(**given) if params is None else replace(params, **given)

    def resolve(self, offer: Offer, search) -> Resolved:
        """Checked against a backend's ``offer`` and filled in from the preset's ``search`` section (the typed
        :class:`retrieval.engine.config.Search`); :class:`ParamError` when the index does not offer a value."""
        method = self.method or search.method
        if method not in offer.methods:
            raise ParamError("method", method, f"one of {', '.join(offer.methods)} (the scorings of this index)")
        rerank = self.rerank or search.rerank
        if rerank not in offer.reranks:
            raise ParamError("rerank", rerank, f"one of {', '.join(offer.reranks)}")
        if self.query_expansion is None:
            n_qe = int(search.query_expansion) if rerank == "spatial" else 0
        elif self.query_expansion and rerank != "spatial":
            raise ParamError("query_expansion", self.query_expansion,
                             f"0 with re-ranking {rerank!r} (query expansion averages verified hits: it needs "
                             f"spatial re-ranking)")
        else:
            n_qe = self.query_expansion
        if offer.alphas is None:
            if self.alpha is not None:
                raise ParamError("alpha", self.alpha, "no alpha (only the object presets' scorings take one)")
            alpha = None
        elif self.alpha is not None:
            alpha = self.alpha
        else:   # the preset's alpha belongs to its scoring; another scoring gets that scoring's default
            alpha = float(search.alpha if method == search.method else offer.alphas.get(method, 1.0))
        if self.verified_only and rerank != "spatial":
            raise ParamError("verified_only", True, f"false with re-ranking {rerank!r} (only spatial re-ranking "
                                                    f"verifies)")
        return Resolved(k=self.k, method=method, rerank=rerank, query_expansion=n_qe, alpha=alpha,
                        shortlist=self.shortlist, min_similarity=self.min_similarity,
                        verified_only=self.verified_only)


@dataclass(frozen=True)
class Resolved:
    """A :class:`SearchParams` checked against an index (:meth:`SearchParams.resolve`): every field set, except
    ``shortlist`` and ``alpha`` (None: the preset's depth; a scoring without alpha). Built only by ``resolve``."""

    k: int
    method: str
    rerank: str
    query_expansion: int
    alpha: float | None
    shortlist: int | None
    min_similarity: float | None = None
    verified_only: bool = False

    def kept(self, hits: list) -> list:
        """The hits this search shows: those ``verified_only`` and ``min_similarity`` keep (the ranking is
        unchanged)."""
        if self.verified_only:
            hits = [h for h in hits if h.verified]
        if self.min_similarity is not None:
            hits = [h for h in hits if h.verified or h.similarity >= self.min_similarity]
        return hits

    def turned(self, n: int) -> Resolved:
        """The search of a turned query (the sideways fallback): its ``n`` best, all verified, no expansion."""
        return replace(self, k=int(n), query_expansion=0, shortlist=int(n), min_similarity=None,
                       verified_only=False)


@dataclass(frozen=True)
class SearchContext:
    """The means of one search call, which are not parameters of the search: ``get_features(id)`` the stored
    features of an indexed image, ``cache`` the described images kept across searches (a thread-safe
    :class:`retrieval.core.cache.BytesLRU`, or None), ``threads`` the images verified side by side (the outcome
    does not depend on it); ``get_local(id)`` the stored local features of an indexed image when ``get_features``
    may give what the verifier reads instead (its evidence, :mod:`retrieval.rerank.evidence`; None: the same)."""

    get_features: Callable
    cache: object = None
    threads: int = 1
    get_local: Callable | None = None

    @property
    def local_features(self) -> Callable:
        """``id -> LocalFeatures`` (what an encoder reads)."""
        return self.get_local or self.get_features
