"""Vectors -> compact codes and searchable structures: PQ/ADC, IVFADC, binary codes, kernel embeddings, inverted files."""
from retrieval.indexing.invfile import InvertedFile  # noqa: E402,F401  (issue 6)
