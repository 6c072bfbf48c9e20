"""Vectors -> compact codes and searchable structures: PQ/ADC, IVFADC, binary codes, kernel embeddings, inverted files."""
# issue 5: binary codes (seed 000) and kernel embeddings (seeds 001, 004)
from retrieval.indexing.binary import LSBC, LSH, PCAE, PCAEITQ, PCAERR, SH, BinaryEmbedding  # noqa: E402,F401
from retrieval.indexing.dim_select import select_dim  # noqa: E402,F401  (issue 4)
from retrieval.indexing.homogeneous_map import BEAHK, HomogeneousKernelMap  # noqa: E402,F401
from retrieval.indexing.invfile import InvertedFile  # noqa: E402,F401  (issue 6)

# issue 4: PQ / ADC, IVFADC, the compiled table look-up scan (seed 002 V, VI-C)
from retrieval.indexing.ivfadc import IVFADC  # noqa: E402,F401
from retrieval.indexing.kernel_exact import ExactKernelSearch  # noqa: E402,F401
from retrieval.indexing.kernel_pca import KernelPCAEmbedding  # noqa: E402,F401
from retrieval.indexing.kernel_search import KPCALSH, KPCAPQ  # noqa: E402,F401
from retrieval.indexing.klsh import KLSH  # noqa: E402,F401
from retrieval.indexing.pq import ProductQuantizer  # noqa: E402,F401
from retrieval.indexing.rmmh import RMMH  # noqa: E402,F401
from retrieval.indexing.scan import lut_scan_topk  # noqa: E402,F401
