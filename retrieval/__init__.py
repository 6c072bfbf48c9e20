"""retrieval: image retrieval from pixels to ranked results.

One folder per stage of the data flow, each importing only the folders below it (docs/architecture.md):
:mod:`retrieval.features` (pixels -> local features), :mod:`retrieval.aggregation` (-> one vector or BoW
histogram per image), :mod:`retrieval.codes` (-> compact codes), :mod:`retrieval.search` (query -> shortlist),
:mod:`retrieval.rerank` (shortlist -> verified), :mod:`retrieval.engine` (a preset -> a trained, searchable
model), then the photo-folder application :mod:`retrieval.app`, the measurements :mod:`retrieval.bench` and the
command line :mod:`retrieval.cli`. :mod:`retrieval.datasets` and :mod:`retrieval.evaluation` hold the official
data sets and protocols, :mod:`retrieval.core` the shared checks and persistence.
"""

from retrieval._version import __version__

__all__ = ["__version__", "Index"]


def __getattr__(name):  # lazy: importing the package stays cheap
    if name == "Index":
        from retrieval.app.index import Index

        return Index
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
