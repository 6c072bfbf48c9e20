"""Query -> shortlist: IVFADC (coarse quantiser + residual PQ), the BoW inverted file scored with l_p or the
query-adaptive delta_p, and kernel search (KPCA + PQ/LSH with exact re-ranking, exact search by the
Cauchy-Schwarz bound)."""

from retrieval.core.lazy import lazy_exports

_EXPORTS = {
    "InvertedFile": "invfile",
    "IVFADC": "ivfadc",
    "ExactKernelSearch": "kernel_exact",
    "KPCALSH": "kernel_search",
    "KPCAPQ": "kernel_search",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["IVFADC", "InvertedFile", "ExactKernelSearch", "KPCALSH", "KPCAPQ"]
