"""retrieval: image retrieval from pixels to ranked results.

Subpackages follow the data flow: :mod:`retrieval.features` (pixels -> local features),
:mod:`retrieval.aggregation` (local features -> one vector per image), :mod:`retrieval.codes`
(vectors -> compact codes and searchable structures) and :mod:`retrieval.cli` (command line).
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Index"]


def __getattr__(name):  # lazy: importing the package stays cheap
    if name == "Index":
        from retrieval.app.index import Index

        return Index
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
