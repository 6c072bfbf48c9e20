"""The ``retrieval`` command groups: a thin layer over the library.

The command groups; each area's module (``retrieval/cli/<area>.py``) adds its commands to them, and
:mod:`retrieval.cli.main` imports every area. Results go to stdout, logs and progress bars to stderr; heavy
imports stay inside the commands so that ``retrieval --help`` is fast.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys

import click

from retrieval._version import __version__
from retrieval.cli.suggest import unknown_command, unknown_option


def _root_obj(ctx) -> dict:
    root = ctx.find_root()
    root.ensure_object(dict)
    return root.obj


def _set_quiet(ctx, param, value):
    if value:
        obj = _root_obj(ctx)
        obj["quiet"] = True
        setup_logging(obj.get("verbose", 0), True)
    return value


def _set_verbose(ctx, param, value):
    if value:
        obj = _root_obj(ctx)
        obj["verbose"] = obj.get("verbose", 0) + value
        setup_logging(obj["verbose"], bool(obj.get("quiet")))
    return value


def verbosity_options(cmd: click.Command) -> click.Command:
    """Give ``cmd`` the ``-q/--quiet`` and ``-v/--verbose`` options of the root group (the same effect where they
    are written: ``retrieval -q index ...`` = ``retrieval index ... -q``), unless it defines them itself."""
    names = {o for p in cmd.params for o in getattr(p, "opts", [])}
    if "--quiet" not in names and "-q" not in names:
        cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_quiet,
                                       help="No progress on stderr (warnings and errors only)."))
    if "--verbose" not in names and "-v" not in names:
        cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_set_verbose,
                                       help="Log progress notes (INFO) on stderr; -vv for debug."))
    return cmd


def quiet_requested(ctx) -> bool:
    """True when ``-q`` was given (globally or to the command)."""
    return bool(_root_obj(ctx).get("quiet"))


FLAG_NAMES = {"k": "--top", "method": "--scoring", "query_expansion": "--qe"}
"""The options whose name is not the library's parameter name with dashes (:func:`flag_of`)."""


def flag_of(param: str) -> str:
    """The command line's option for the library parameter ``param``: ``add_root`` is ``--add-root``, ``k`` is
    ``--top`` (:data:`FLAG_NAMES`)."""
    return FLAG_NAMES.get(param, "--" + param.replace("_", "-"))


class RetrievalCommand(click.Command):
    """A command whose unknown options get one line naming the closest ones (:mod:`retrieval.cli.suggest`)."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise unknown_option(self, ctx, exc.option_name) from None


class RetrievalGroup(click.Group):
    """A group that turns library errors (ValueError, OSError) into one clear line instead of a traceback, gives
    every command below it ``-q`` / ``-v``, and answers a mistyped command or option with the closest ones."""

    command_class = RetrievalCommand

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise unknown_option(self, ctx, exc.option_name) from None

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.NoSuchCommand:
            raise unknown_command(self, ctx, click.utils.make_str(args[0])) from None

    def add_command(self, cmd, name=None):
        if not isinstance(cmd, click.Group):
            verbosity_options(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except (ValueError, OSError, RuntimeError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            # a refused parameter (retrieval.core.checks.ParamError) is worded with the option that sets it
            worded = getattr(exc, "worded", None)
            raise click.ClickException(worded(flag_of) if worded else str(exc)) from None
        except sqlite3.Error as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise click.ClickException(f"the index catalog (catalog.db): {exc}; nothing was committed (is the disk "
                                       f"full, or the file size limited? 'retrieval info' shows the index)") from None


def setup_logging(verbose: int, quiet: bool) -> None:
    """stderr logging: warnings and errors by default and with ``-q`` (which also silences progress), INFO with
    ``-v``, DEBUG with ``-vv``."""
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO if verbose else
                                           logging.WARNING)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s", force=True)
    # Dask's scheduler and worker processes (bench scale, a local cluster) configure their own logging from
    # Dask's configuration, which children read from the environment: the same level there, unless the user set one
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", logging.getLevelName(level).lower())


@click.group(name="retrieval", cls=RetrievalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="retrieval")
@click.option("-v", "--verbose", count=True, help="Log progress notes (INFO) on stderr; -vv for debug. Accepted "
              "by every command as well.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr (warnings and errors only). Accepted by "
              "every command as well.")
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
    ctx.obj["verbose"] = verbose
    setup_logging(verbose, quiet)
    from retrieval.core.persistence import set_crash_point

    set_crash_point(os.environ.get("RETRIEVAL_CRASH_AT"))   # fault injection of the crash-safety tests


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
