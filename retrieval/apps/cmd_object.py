"""CLI commands of issue 6 (object retrieval): bench invfile, train large vocabularies."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
