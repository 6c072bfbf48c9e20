"""Vectors -> compact codes and searchable structures: PQ/ADC, IVFADC, binary codes, kernel embeddings, inverted files."""
