"""CLI commands of issue 3 (aggregation): train vocab, bench aggregate."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
