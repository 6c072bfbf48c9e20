"""Every command is documented: docs/cli-reference.md equals the generated --help of the whole command tree."""

from pathlib import Path

from retrieval.apps.clidoc import iter_commands, render_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli-reference.md"


def test_every_command_has_help_text():
    from retrieval.apps.cli import main

    missing = [" ".join(p) for p, cmd in iter_commands(main) if not (cmd.help or cmd.short_help)]
    assert missing == [], f"commands without help text: {missing}"


def test_cli_reference_is_up_to_date():
    expected = render_reference()
    assert DOC.exists(), "docs/cli-reference.md is missing: run `python -m retrieval.apps.clidoc > docs/cli-reference.md`"
    assert DOC.read_text() == expected, (
        "docs/cli-reference.md is out of date: run `python -m retrieval.apps.clidoc > docs/cli-reference.md`"
    )
