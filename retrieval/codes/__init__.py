"""Vectors -> compact codes: product quantisation (ADC/SDC) and its compiled look-up scan, binary embeddings with
symmetric and asymmetric distances, explicit kernel embeddings, and the choice of the projected dimension."""

from retrieval.core.lazy import lazy_exports

_EXPORTS = {
    "BEAHK": "homogeneous_map",
    "BinaryEmbedding": "binary",
    "HomogeneousKernelMap": "homogeneous_map",
    "KernelPCAEmbedding": "kernel_pca",
    "KLSH": "klsh",
    "LSBC": "binary",
    "LSH": "binary",
    "PCAE": "binary",
    "PCAEITQ": "binary",
    "PCAERR": "binary",
    "ProductQuantizer": "pq",
    "RMMH": "rmmh",
    "SH": "binary",
    "lut_scan_topk": "scan",
    "select_dim": "dim_select",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "BEAHK", "KLSH", "LSBC", "LSH", "PCAE", "PCAEITQ", "PCAERR", "RMMH", "SH", "BinaryEmbedding",
    "HomogeneousKernelMap", "KernelPCAEmbedding", "ProductQuantizer", "lut_scan_topk", "select_dim",
]
