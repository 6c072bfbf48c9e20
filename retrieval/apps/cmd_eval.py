"""CLI commands of issue 8 (evaluation): eval score, eval run, data download."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
