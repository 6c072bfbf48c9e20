"""Did-you-mean for the command line: a mistyped command, option or preset name gets one line (exit status 2)
naming the bad value and the closest valid ones (:func:`difflib.get_close_matches`).

- ``retrieval serach`` -> ``Error: no such command 'serach'. Did you mean 'query'?`` (a few everyday words, such
  as ``search`` or ``delete``, lead to the command that does it: :data:`COMMAND_SYNONYMS`).
- ``retrieval duplicates --thresold 0.5`` -> ``Error: no such option '--thresold' for 'retrieval duplicates'. Did
  you mean '--threshold'?``
- ``retrieval index --preset acurate`` -> ``Error: unknown preset 'acurate'. Did you mean 'accurate'? Presets for
  photo folders: default, accurate, object, compact ...``; the research presets (``paper-*``) are named only when
  the typo is close to one of them.
"""

from __future__ import annotations

import difflib
import os

import click

CUTOFF = 0.6
"""Least :class:`difflib.SequenceMatcher` ratio of a suggestion (difflib's default)."""

MARGIN = 0.1
"""A suggestion is named only when its ratio is within this of the best one's (``serach``: ``search``, 0.83, and
not ``extract``, 0.62)."""

COMMAND_SYNONYMS = {
    "search": "query", "find": "query", "lookup": "query",
    "add": "index", "sync": "index", "scan": "index", "update": "index", "build": "index",
    "delete": "remove", "rm": "remove", "del": "remove",
    "ls": "list", "status": "info", "show": "info",
    "dedup": "duplicates", "dedupe": "duplicates", "dupes": "duplicates", "copies": "duplicates",
    "web": "serve", "server": "serve", "browse": "serve",
    "verify": "check", "repair": "check", "fsck": "check",
    "merge": "compact", "features": "extract",
}
"""Everyday words a photographer may type for a command, and the command that does it."""


class OneLineUsageError(click.UsageError):
    """A usage error (exit status 2) shown as one ``Error: ...`` line, without click's usage and help hint."""

    def show(self, file=None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file, err=file is None)


def close_matches(word: str, choices, n: int = 3) -> list[str]:
    """The ``choices`` closest to ``word`` (best first; compared without case and leading dashes): those of
    :func:`difflib.get_close_matches` within :data:`MARGIN` of the best one."""
    key = {c.lstrip("-").lower(): c for c in choices}
    w = word.lstrip("-").lower()
    found = difflib.get_close_matches(w, list(key), n=n, cutoff=CUTOFF)
    ratio = [difflib.SequenceMatcher(None, w, k).ratio() for k in found]
    return [key[k] for k, r in zip(found, ratio, strict=True) if r >= ratio[0] - MARGIN]


def _quoted(names) -> str:
    names = [f"'{n}'" if " " not in n else "'{}' {}".format(*n.split(" ", 1)) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def unknown_command(group: click.Group, ctx: click.Context, name: str) -> OneLineUsageError:
    """The error for ``name``, not a command of ``group``: the closest commands (or synonyms), else the list."""
    commands = sorted(c for c in group.list_commands(ctx) if not getattr(group.get_command(ctx, c), "hidden", False))
    synonyms = {w: c for w, c in COMMAND_SYNONYMS.items() if c in commands} if ctx.parent is None else {}
    found, words = [], {}
    for m in close_matches(name, commands + sorted(synonyms)):
        cmd = m if m in commands else synonyms[m]
        if m not in commands:
            words.setdefault(cmd, m)
        if cmd not in found:
            found.append(cmd)
    where = ctx.command_path
    if found:
        said = [f"{c} (for '{words[c]}')" if c in words else c for c in found]
        return OneLineUsageError(f"no such command '{name}'. Did you mean {_quoted(said)}? ('{where} --help' "
                                 f"lists the commands)")
    return OneLineUsageError(f"no such command '{name}'; the commands of '{where}' are {', '.join(commands)}.")


def unknown_option(command: click.Command, ctx: click.Context, name: str) -> OneLineUsageError:
    """The error for ``name``, not an option of ``command``: the closest of its visible long options."""
    options = [o for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden
               for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    found = close_matches(name, options) if name.startswith("--") else []
    where = ctx.command_path
    if found:
        return OneLineUsageError(f"no such option '{name}' for '{where}'. Did you mean {_quoted(found)}?")
    return OneLineUsageError(f"no such option '{name}' for '{where}' ('{where} --help' lists its options).")


def check_preset_name(value: str | None, option: str = "--preset") -> None:
    """Nothing when ``value`` is None, a bundled preset name or an existing file; else a one-line usage error
    (exit status 2): a missing preset file, or an unknown name with the closest names and the presets for photo
    folders."""
    if value is None or os.path.isfile(value):
        return   # a preset file: read (and checked) by the library
    if value.lower().endswith(".json") or os.sep in value:
        raise OneLineUsageError(f"{option} {value!r}: no such preset file (a preset is a name from 'retrieval "
                                f"presets' or a .json file).")
    from retrieval.cli.describe import PRESET_SUMMARIES
    from retrieval.engine.presets import preset_names

    names = preset_names()
    if value in names:
        return
    users = [n for n in PRESET_SUMMARIES if n in names]
    found = close_matches(value, users) or close_matches(value, [n for n in names if n not in users], n=2)
    hint = f" Did you mean {_quoted(found)}?" if found else ""
    raise OneLineUsageError(f"{option} {value!r}: unknown preset.{hint} Presets for photo folders: "
                            f"{', '.join(users)} ('retrieval presets --all' lists the {len(names) - len(users)} "
                            f"that reproduce published tables; a .json file is also accepted).")
