"""CLI commands of issue 7 (application): index, query, info, remove, presets, demo."""

from __future__ import annotations

import click  # noqa: F401

from retrieval.apps.cli import bench, data, eval_, main, train  # noqa: F401
