"""CLI commands of issue 4 (compression and search): bench pq, bench ivfadc."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
