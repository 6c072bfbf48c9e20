"""Result output for people and for pipes: ``--format table|json|jsonl|csv|paths`` (and ``-0``).

One rule for every command that has it (query, info, list, duplicates, match; docs/cli.md, "Output formats"):

- ``table`` (default): for people; a header line, the path in the last column.
- ``json``: one JSON document (a list of records, or the command's one object), indented by 2 spaces.
- ``jsonl``: one compact JSON object per line (one per record), nothing else.
- ``csv``: RFC 4180 with a header row; lists and objects in a cell are JSON text.
- ``paths``: only paths, one per line, or NUL-terminated with ``-0`` (for ``xargs -0``).

JSON is UTF-8 and unescaped (``ensure_ascii=False``): a path ``Müller.jpg`` stays ``Müller.jpg``. ``--json`` is
kept as the alias of ``--format json``.
"""

from __future__ import annotations

import csv
import functools
import io
import json

import click

FORMATS = ("table", "json", "jsonl", "csv", "paths")


def dumps(obj, indent: int | None = None) -> str:
    """JSON text, UTF-8 unescaped; compact on one line unless ``indent``."""
    if indent is None:
        return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(obj, ensure_ascii=False, indent=indent)


class Output:
    """The chosen output format of one command run (``fmt`` and ``null``) and the writers of each format."""

    def __init__(self, fmt: str, null: bool = False):
        self.fmt, self.null = fmt, null

    @property
    def is_table(self) -> bool:
        return self.fmt == "table"

    def document(self, obj) -> None:
        """``json``: the whole result as one indented document."""
        click.echo(dumps(obj, indent=2))

    def lines(self, records) -> None:
        """``jsonl``: one compact object per line."""
        for r in records:
            click.echo(dumps(r))

    def csv(self, records, columns) -> None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in records:   # written as they come (records may be a generator over a large catalog)
            w.writerow([_cell(r.get(c)) for c in columns])
            if buf.tell() > 1 << 16:
                click.echo(buf.getvalue(), nl=False)
                buf.seek(0)
                buf.truncate()
        click.echo(buf.getvalue(), nl=False)

    def paths(self, paths) -> None:
        """``paths``: one per line, or NUL-terminated with ``-0``; an empty string is an empty record (a group
        separator)."""
        end = "\0" if self.null else "\n"
        for p in paths:
            click.echo(f"{p}{end}", nl=False)

    def records(self, records, *, columns, table, paths=None, document=None) -> None:
        """Write ``records`` (dicts: a list, or an iterable read once, kept whole only for ``json``) in the chosen
        format; ``table()`` prints the people's table, ``paths`` (default: each record's ``path``) the paths,
        ``document`` (default: the list) the json."""
        if self.fmt == "json":
            self.document(list(records) if document is None else document)
        elif self.fmt == "jsonl":
            self.lines(records)
        elif self.fmt == "csv":
            self.csv(records, columns)
        elif self.fmt == "paths":
            self.paths((r["path"] for r in records) if paths is None else paths)
        else:
            table()


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict, tuple)):
        return dumps(v)
    return str(v)


def format_options(formats=FORMATS, json_help: str = "Same as --format json.", dest: str = "out"):
    """``--format``, ``--json`` (its alias for json) and ``-0/--null`` (NUL-separated paths); the command
    receives the parameter ``dest`` (an :class:`Output`) instead of them."""

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args, output_format=None, as_json=False, null=False, **kw):
            if as_json and output_format not in (None, "json"):
                raise click.UsageError(f"--json is --format json; it cannot go with --format {output_format}.")
            fmt = output_format or ("json" if as_json else "paths" if null else "table")
            if null and fmt != "paths":
                raise click.UsageError(f"-0 separates paths with NUL characters: it goes with --format paths, not "
                                       f"--format {fmt}.")
            return f(*args, **{dest: Output(fmt, null)}, **kw)

        wrapper = click.option("-0", "--null", "null", is_flag=True,
                               help="NUL-terminated paths (implies --format paths), for 'xargs -0'.")(wrapper)
        wrapper = click.option("--json", "as_json", is_flag=True, help=json_help)(wrapper)
        wrapper = click.option("--format", "output_format", type=click.Choice(list(formats)), default=None,
                               help="Output: table (default, for people), json (one document), jsonl (one "
                                    "object per line), csv, paths (one per line). See docs/cli.md.")(wrapper)
        return wrapper

    return deco
