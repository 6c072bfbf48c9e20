"""Binary codes with symmetric and asymmetric distances (Gordo et al. 2014): the public entry point.

``retrieval.codes.binary`` gathers the six embeddings h(x) = q(g(x)) of Gordo et al. 2014, section 2
(:class:`LSH`, :class:`LSBC`, :class:`SH`, :class:`PCAE`, :class:`PCAERR`, :class:`PCAEITQ`), each with
``fit``, ``encode``, ``add`` and ``search(x, k, distance="hamming" | "expectation" | "expectation_hat" |
"lower_bound")``, and the search primitives (packed bit order, compiled Hamming scan, per-byte tables for the
shared look-up scan kernel). Packed bit order: bit k of a code is in byte k // 8 at position k % 8 counted
from the least significant bit (``np.packbits(bits, axis=1, bitorder="little")``).
"""

from retrieval.codes.binary_embeddings import (
    DISTANCES,
    EMBEDDINGS,
    LSBC,
    LSH,
    PCAE,
    PCAEITQ,
    PCAERR,
    SH,
    BinaryEmbedding,
    make_embedding,
    random_orthogonal,
)
from retrieval.codes.binary_scan import (
    BIT_ORDER,
    asymmetric_topk,
    byte_tables,
    hamming_distances,
    hamming_topk,
    pack_bits,
    unpack_bits,
)

__all__ = [
    "BIT_ORDER", "DISTANCES", "EMBEDDINGS", "LSBC", "LSH", "PCAE", "PCAEITQ", "PCAERR", "SH",
    "BinaryEmbedding", "asymmetric_topk", "byte_tables", "hamming_distances", "hamming_topk",
    "make_embedding", "pack_bits", "random_orthogonal", "unpack_bits",
]
