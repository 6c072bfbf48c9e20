"""Option bundles shared by several commands, as decorators (one definition, one help text)."""

from __future__ import annotations

import json

import click


def json_option(help: str = "Print one JSON object instead of text."):
    """``--json``: the command prints its result as JSON on stdout (parameter ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def seed_option(help: str = "Random seed."):
    """``--seed`` (default 0): every random draw of the command follows from it."""
    return click.option("--seed", type=int, default=0, show_default=True, help=help)


def threads_option(default: int = 1, help: str = "Threads."):
    """``--threads N`` (at least 1)."""
    return click.option("--threads", type=click.IntRange(1), default=default, show_default=True, help=help)


def workers_option(help: str = "Extraction processes (default: all cores)."):
    """``--workers N`` (at least 1, default: the library's choice)."""
    return click.option("--workers", type=click.IntRange(1), default=None, help=help)


def int_list(text: str, option: str = "--bits") -> list[int]:
    """``"32,64"`` -> ``[32, 64]``; a usage error naming ``option`` unless every item is a positive integer."""
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return out


def csv_items(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def echo_json(obj, indent: int | None = 2, **kw) -> None:
    """Print ``obj`` as JSON on stdout."""
    click.echo(json.dumps(obj, indent=indent, **kw))
