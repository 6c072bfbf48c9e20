"""Query -> shortlist: IVFADC (coarse quantiser + residual PQ), the BoW inverted file scored with l_p or the
query-adaptive delta_p, and kernel search (KPCA + PQ/LSH with exact re-ranking, exact search by the
Cauchy-Schwarz bound)."""

from retrieval.search.invfile import InvertedFile
from retrieval.search.ivfadc import IVFADC
from retrieval.search.kernel_exact import ExactKernelSearch
from retrieval.search.kernel_search import KPCALSH, KPCAPQ

__all__ = ["IVFADC", "InvertedFile", "ExactKernelSearch", "KPCALSH", "KPCAPQ"]
