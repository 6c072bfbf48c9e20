"""CLI commands of issue 5 (binary codes and kernels): bench binary, bench kernels."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
