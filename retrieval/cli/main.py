"""Entry point of the ``retrieval`` command: the groups of :mod:`retrieval.cli.groups` with every area's commands."""

from retrieval.cli import (  # noqa: F401  (register)
    aggregation,
    app,
    bench_cli,
    bench_duplicates,
    bench_generic,
    bench_library,
    binary,
    duplicates,
    evaluate,
    features,
    indexing,
    objects,
    query,
    serve,
)
from retrieval.cli.groups import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    main()
