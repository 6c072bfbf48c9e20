"""The ``retrieval`` command groups: a thin layer over the library.

The command groups; each area's module (``retrieval/cli/<area>.py``) adds its commands to them, and
:mod:`retrieval.cli.main` imports every area. Results go to stdout, logs and progress bars to stderr; heavy
imports stay inside the commands so that ``retrieval --help`` is fast.
"""

from __future__ import annotations

import logging
import sqlite3
import sys

import click

from retrieval._version import __version__


class RetrievalGroup(click.Group):
    """A group that turns library errors (ValueError, OSError) into one clear line instead of a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except (ValueError, OSError, RuntimeError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise click.ClickException(str(exc)) from None
        except sqlite3.Error as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise click.ClickException(f"the index catalog (catalog.db): {exc}; nothing was committed (is the disk "
                                       f"full, or the file size limited? 'retrieval info' shows the index)") from None


def setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s", force=True)


@click.group(name="retrieval", cls=RetrievalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="retrieval")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.option("--debug", is_flag=True, hidden=True, help="Show full tracebacks.")
@click.pass_context
def main(ctx, verbose, quiet, debug):
    """Image retrieval from pixels to ranked results.

    Index a folder of photos and query it by image or by box; evaluate configurations on
    Holidays and Oxford; benchmark the engine against faiss.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["quiet"] = quiet
    setup_logging(verbose, quiet)


@main.group(cls=RetrievalGroup)
def train():
    """Train models (vocabularies, PCA, codecs) from images or descriptors."""


@main.group(name="eval", cls=RetrievalGroup)
def eval_():
    """Score result files and run benchmark protocols."""


@main.group(cls=RetrievalGroup)
def data():
    """Download and check datasets."""


@main.group(cls=RetrievalGroup)
def bench():
    """Speed and accuracy benchmarks, reported as ratios against a reference in the same run."""
