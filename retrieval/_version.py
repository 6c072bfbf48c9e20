"""The version of the retrieval package (one place; read by the package, the file headers and the CLI)."""

__version__ = "0.2.0.dev0"
