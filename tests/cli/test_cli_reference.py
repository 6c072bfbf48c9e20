"""Every command is documented: docs/cli-reference.md equals the generated --help of the whole command tree."""

from pathlib import Path

from retrieval.cli.doc import iter_commands, render_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli-reference.md"


def test_every_command_has_help_text():
    from retrieval.cli.main import main

    missing = [" ".join(p) for p, cmd, _ in iter_commands(main) if not (cmd.help or cmd.short_help)]
    assert missing == [], f"commands without help text: {missing}"


def test_cli_reference_is_up_to_date():
    expected = render_reference()
    assert DOC.exists(), "docs/cli-reference.md is missing: run `python -m retrieval.cli.doc > docs/cli-reference.md`"
    assert DOC.read_text() == expected, (
        "docs/cli-reference.md is out of date: run `python -m retrieval.cli.doc > docs/cli-reference.md`"
    )


def test_reference_does_not_depend_on_what_ran_before():
    from click.testing import CliRunner

    from retrieval.cli.main import main

    before = render_reference()
    for path, _cmd, _ctx in list(iter_commands(main))[:8]:
        CliRunner().invoke(main, [*path, "--help"])
    assert render_reference() == before
