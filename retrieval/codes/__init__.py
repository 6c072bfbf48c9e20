"""Vectors -> compact codes: product quantisation (ADC/SDC) and its compiled look-up scan, binary embeddings with
symmetric and asymmetric distances, explicit kernel embeddings, and the choice of the projected dimension."""

from retrieval.codes.binary import LSBC, LSH, PCAE, PCAEITQ, PCAERR, SH, BinaryEmbedding
from retrieval.codes.dim_select import select_dim
from retrieval.codes.homogeneous_map import BEAHK, HomogeneousKernelMap
from retrieval.codes.kernel_pca import KernelPCAEmbedding
from retrieval.codes.klsh import KLSH
from retrieval.codes.pq import ProductQuantizer
from retrieval.codes.rmmh import RMMH
from retrieval.codes.scan import lut_scan_topk

__all__ = [
    "BEAHK", "KLSH", "LSBC", "LSH", "PCAE", "PCAEITQ", "PCAERR", "RMMH", "SH", "BinaryEmbedding",
    "HomogeneousKernelMap", "KernelPCAEmbedding", "ProductQuantizer", "lut_scan_topk", "select_dim",
]
