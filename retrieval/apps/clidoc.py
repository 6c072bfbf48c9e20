"""Generate the command-line reference (docs/cli-reference.md) from the click command tree.

``python -m retrieval.apps.clidoc > docs/cli-reference.md`` regenerates it; a test checks that the committed file
is up to date, so every command and option is documented.
"""

from __future__ import annotations

import click


def iter_commands(group: click.Group, prefix: tuple[str, ...] = ()):
    """Yield ``(path, command)`` for every command below ``group``, depth first, sorted by name."""
    ctx = click.Context(group, info_name=" ".join(prefix) or "retrieval")
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        path = prefix + (name,)
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from iter_commands(cmd, path)


def _help_text(cmd: click.Command, path: tuple[str, ...]) -> str:
    info = "retrieval " + " ".join(path) if path else "retrieval"
    with click.Context(cmd, info_name=info, terminal_width=110, max_content_width=110) as ctx:
        return cmd.get_help(ctx)


def render_reference() -> str:
    """Markdown of ``--help`` for the root and for every command."""
    from retrieval.apps.cli import main

    out = [
        "# Command-line reference (generated)",
        "",
        "Generated from the `--help` of every command by `python -m retrieval.apps.clidoc > docs/cli-reference.md`;",
        "a test keeps it in sync with the code.",
        "",
        "## retrieval",
        "",
        "```",
        _help_text(main, ()).rstrip(),
        "```",
        "",
    ]
    for path, cmd in iter_commands(main):
        out += [f"## retrieval {' '.join(path)}", "", "```", _help_text(cmd, path).rstrip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    click.echo(render_reference(), nl=False)
