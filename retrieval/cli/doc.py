"""Generate the command-line reference (docs/cli-reference.md) from the click command tree.

``python -m retrieval.cli.doc > docs/cli-reference.md`` regenerates it; a test checks that the committed file
is up to date, so every command and option is documented.
"""

from __future__ import annotations

import click


def _root_context(group: click.Group) -> click.Context:
    return click.Context(group, info_name="retrieval", **group.context_settings)


def iter_commands(group: click.Group, prefix: tuple[str, ...] = (), parent: click.Context | None = None):
    """Yield ``(path, command, context)`` for every command below ``group``, depth first, sorted by name.

    Each context is a child of its group's context, as when the command line runs, so inherited settings
    (``-h/--help``) render as users see them.
    """
    ctx = parent or _root_context(group)
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        path = prefix + (name,)
        sub = click.Context(cmd, info_name=name, parent=ctx, **cmd.context_settings)
        yield path, cmd, sub
        if isinstance(cmd, click.Group):
            yield from iter_commands(cmd, path, sub)


def _help_text(ctx: click.Context) -> str:
    ctx.terminal_width = ctx.max_content_width = 110
    return ctx.command.get_help(ctx)


def render_reference() -> str:
    """Markdown of ``--help`` for the root and for every command."""
    from retrieval.cli.main import main

    out = [
        "# Command-line reference (generated)",
        "",
        "Generated from the `--help` of every command by `python -m retrieval.cli.doc > docs/cli-reference.md`;",
        "a test keeps it in sync with the code.",
        "",
        "## retrieval",
        "",
        "```",
        _help_text(_root_context(main)).rstrip(),
        "```",
        "",
    ]
    for path, _cmd, ctx in iter_commands(main):
        out += [f"## retrieval {' '.join(path)}", "", "```", _help_text(ctx).rstrip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    click.echo(render_reference(), nl=False)
